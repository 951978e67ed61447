#!/usr/bin/env bash
# Python's kazoo (a ZooKeeper client with its own Lock recipe) in a venv of the repo, for
# lockkit's ZooKeeper interop test. Idempotent: installs on the first run, then only prints.
#
#   scripts/kazoo.sh      prints the venv's python (with kazoo importable) on stdout
#
# The venv lives in <repo>/.run/kazoo-venv (Debian's Python refuses system-wide pip installs).
# Progress goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.run/kazoo-venv"
PY="$VENV/bin/python"

if ! "$PY" -c 'import kazoo' >/dev/null 2>&1; then
    echo "[kazoo] installing kazoo into $VENV" >&2
    mkdir -p "$ROOT/.run"
    python3 -m venv "$VENV" >&2
    "$PY" -m pip install --quiet --disable-pip-version-check 'kazoo>=2.9,<3' >&2
    "$PY" -c 'import kazoo' || { echo "[kazoo] kazoo did not install" >&2; exit 1; }
fi
printf '%s\n' "$PY"
