#!/usr/bin/env bash
# `make demo`: the project's story in three acts on two seckill instances (loadtest/demo/run.py):
#   1. no lock: the `none` strategy oversells;
#   2. the default strategy (`owned-shards`) sells 10000 units over 20 shards exactly;
#   3. the same sale through a fault (b cut off from PostgreSQL past its lease with a batch on the
#      wire, then the bytes delivered late; then b frozen past its lease): fence rejections, and
#      the books balance; the same fault without the fence (`owned-unfenced`) oversells.
# Live progress each second, a sale page to watch (its URL is printed), a final table.
#
#   make demo                    run it, then stop everything it started
#   DEMO_RATE=2500 DEMO_FAULT_RATE=1000 DEMO_TOTAL=10000 DEMO_SHARDS=20 DEMO_LEASE_MS=1000 (defaults)
#
# Exit status: 0 when the default strategy held every guarantee, 1 if one broke, 2 on set-up errors.
set -euo pipefail

SCRIPT_TAG=demo
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

started_services=0
[[ "$(bash scripts/services.sh status 2>/dev/null | grep -c 'running (pid' || true)" -ge 1 ]] || started_services=1
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local rc=$?
    if [[ "$started_services" -eq 1 && "${KEEP_SERVICES:-0}" != 1 ]]; then
        bash scripts/services.sh down || rc=1
    fi
    exit "$rc"
}
on_exit cleanup

bash scripts/services.sh up >/dev/null
eval "$(bash scripts/services.sh env)"
log "building seckill and the fault proxy (release)"
cargo build --quiet --release -p seckill -p chaos --bin seckill --bin faultproxy
python3 loadtest/demo/run.py
