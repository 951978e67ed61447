#!/usr/bin/env bash
# Installs the peer lock-library benchmark harnesses (see README.md beside this file):
#   - a Python venv at .run/peers-venv (repo root) with the pins of requirements.txt,
#   - node-redlock's node_modules from package-lock.json (npm ci),
#   - the rslock-bench binary (cargo build --release, its own target/ dir).
# Idempotent: each step is skipped or silent when already up to date.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/.run/peers-venv"

for tool in python3 node npm cargo; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "setup.sh: $tool not found on PATH" >&2
    exit 1
  fi
done

# Python: venv + exact pins; reinstalled only when requirements.txt changed.
requirements="$here/requirements.txt"
stamp="$venv/.peerbench-requirements.txt"
if [[ ! -x "$venv/bin/python" ]]; then
  mkdir -p "$root/.run"
  python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp"; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$requirements"
  cp "$requirements" "$stamp"
fi

# Node: npm ci only when package-lock.json differs from what was installed last.
node_dir="$here/node-redlock"
lock_stamp="$node_dir/node_modules/.peerbench-package-lock.json"
if ! cmp -s "$node_dir/package-lock.json" "$lock_stamp"; then
  (cd "$node_dir" && npm ci --silent --no-audit --no-fund >/dev/null)
  cp "$node_dir/package-lock.json" "$lock_stamp"
fi

# Rust: cargo is incremental and --quiet prints nothing when the binary is up to date.
cargo build --quiet --release --locked \
  --manifest-path "$here/rslock/Cargo.toml" \
  --target-dir "$here/rslock/target"
