#!/usr/bin/env bash
# Python's kazoo (a ZooKeeper client with its own Lock recipe) in a venv of the repo, for
# lockkit's ZooKeeper interop test. Idempotent: installs on the first run, then only prints.
#
#   scripts/kazoo.sh      prints the venv's python (with kazoo importable) on stdout
#
# The venv lives in <repo>/.run/kazoo-venv (Debian's Python refuses system-wide pip installs).
# Progress goes to stderr.
set -euo pipefail

SCRIPT_TAG=kazoo
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV="$ROOT/.run/kazoo-venv"
PY="$VENV/bin/python"

if ! "$PY" -c 'import kazoo' >/dev/null 2>&1; then
    log "installing kazoo into $VENV"
    mkdir -p "$ROOT/.run"
    python3 -m venv "$VENV" >&2
    "$PY" -m pip install --quiet --disable-pip-version-check 'kazoo>=2.9,<3' >&2
    "$PY" -c 'import kazoo' || die "kazoo did not install"
fi
printf '%s\n' "$PY"
