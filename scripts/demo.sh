#!/usr/bin/env bash
# The seckill demo: project Redis and PostgreSQL, two service instances, a 10000-unit sale over
# 20 shards driven to sold out by k6 from many concurrent clients, then the same sale on 1 shard,
# and the figures side by side (sold, oversold, stranded, duplicates, orders/s).
#
#   make demo                        run it, then stop everything it started
#   KEEP_RUNNING=1 make demo         leave the services and both instances up afterwards
#   DEMO_SHARDS="20 1" DEMO_TOTAL=10000 DEMO_RATE=3000 DEMO_DURATION=20s   (defaults)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

cleanup() {
    local rc=$?
    if [[ "${KEEP_RUNNING:-0}" != 1 ]]; then
        bash scripts/instances.sh stop || rc=1
        bash scripts/services.sh down || rc=1
    else
        echo "KEEP_RUNNING=1: instances at $(bash scripts/instances.sh urls); admin token: scripts/instances.sh token"
        echo "stop with: scripts/instances.sh stop && make down"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash scripts/services.sh up >/dev/null
eval "$(bash scripts/services.sh env)"
cargo build --quiet --release -p seckill
bash scripts/instances.sh start 2
TARGETS="$(bash scripts/instances.sh urls)"
ADMIN_TOKEN="$(bash scripts/instances.sh token)"
RUN_ID="$(date -u +%Y%m%dT%H%M%S)"
mkdir -p .run/demo

results=()
for shards in ${DEMO_SHARDS:-20 1}; do
    sku="demo-$RUN_ID-$shards"
    echo "== sale $sku: ${DEMO_TOTAL:-10000} units over $shards shard(s), owned-shards, k6 at ${DEMO_RATE:-3000} req/s"
    # k6 creates the sale in its setup() and checks the audit in its teardown().
    bash scripts/k6.sh --quiet loadtest/k6/seckill.js \
        -e TARGETS="$TARGETS" -e SKU="$sku" -e ADMIN_TOKEN="$ADMIN_TOKEN" -e SETUP_SALE=1 \
        -e TOTAL="${DEMO_TOTAL:-10000}" -e SHARDS="$shards" -e STRATEGY=owned-shards \
        -e RATE="${DEMO_RATE:-3000}" -e DURATION="${DEMO_DURATION:-20s}" -e USERS=50000 \
        -e SUMMARY_PATH=".run/demo/$sku.json" >".run/demo/$sku.k6.log" 2>&1 \
        || { tail -30 ".run/demo/$sku.k6.log"; echo "k6 thresholds failed for $sku" >&2; exit 1; }
    audit="$(curl -fsS "${TARGETS%%,*}/v1/sales/$sku/audit")"
    # Orders per second while the sale was selling: accepted orders over first-to-last order time.
    rate="$(psql "$DATABASE_URL" -Atc "SELECT round(count(*) / greatest(extract(epoch FROM max(created_at) - min(created_at)), 0.001))
                                     FROM orders WHERE sku = '$sku'")"
    results+=("$shards|$audit|$rate")
done

echo
printf '%-7s %6s %6s %9s %9s %11s %11s %9s\n' shards sold total oversold stranded duplicates consistent orders/s
for row in "${results[@]}"; do
    IFS='|' read -r shards audit rate <<<"$row"
    python3 - "$shards" "$audit" "$rate" <<'PY'
import json, sys
shards, audit, rate = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
print(f"{shards:<7} {audit['sold']:>6} {audit['total']:>6} {audit['oversold']:>9} {audit['stranded']:>9} "
      f"{audit['duplicates']:>11} {str(audit['consistent']).lower():>11} {rate:>9}")
PY
done
