#!/usr/bin/env bash
# Run the lockkit demo against project-owned Redis and PostgreSQL.
# Services are stopped afterwards unless KEEP_SERVICES=1. Extra arguments go to the demo.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

cleanup() {
    local rc=$?
    if [[ "${KEEP_SERVICES:-0}" != 1 ]]; then
        bash scripts/services.sh down || rc=1
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash scripts/services.sh up >/dev/null
eval "$(bash scripts/services.sh env)"

cargo run --quiet -p lockkit --example demo -- "$@"
