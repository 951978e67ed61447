#!/usr/bin/env bash
# The comparison runner (`make bench`): stock strategies x shards under k6 load, the wrk cells
# (capacity, retry storm, hot users, HTTP floor), the HTTP, PostgreSQL and Redis ceilings,
# lockkit next to the peer lock libraries. See loadtest/README.md.
#
#   scripts/bench.sh             full run: loadtest/results/<UTC>.json, latest.json, latest.md,
#                                latest.svg, latest-latency.svg
#   scripts/bench.sh --smoke     CI check (~1.5 min after the build): loadtest/results/smoke-latest.json;
#                                exits non-zero on any correctness violation
#   scripts/bench.sh --only-capacity   the wrk cells alone (~4 min): loadtest/results/capacity-latest.*
#   scripts/bench.sh --help      the runner's options (any of them can be added to the above)
#
# Installs what it needs, idempotently: Redis/PostgreSQL (scripts/services.sh up), in full mode
# ZooKeeper and etcd (ZOOKEEPER_URL, ETCD_URL), the extra Redis servers of lockkit's Redlock,
# Cluster and Sentinel backends (scripts/lock-servers.sh; these start in the lock section),
# the binaries `seckill` and `lockctl` (BENCH_SKIP_BUILD=1: use those already built, e.g. in
# CARGO_TARGET_DIR; BENCH_DATABASE_URL and BENCH_REDIS_URL: see below), k6 (scripts/k6.sh), wrk
# (Debian), psycopg 3 (the runner's PostgreSQL driver), and in full mode the peer harnesses
# (loadtest/peers/setup.sh).
# Services that were not running before are stopped again at the end (KEEP_SERVICES=1 leaves them
# running); services that were already running are left alone. The lock servers follow the same rule.
set -euo pipefail

SCRIPT_TAG=bench
DIE_STATUS=2
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

smoke=0
peers=1
lock_servers=1
k6=1
wrk=1
for arg in "$@"; do
    case "$arg" in
        --smoke) smoke=1 ;;
        --no-peers) peers=0 ;;
        --no-ceilings) lock_servers=0 ;; # no lockkit section: the extra servers would idle
        --only-capacity) lock_servers=0 peers=0 k6=0 ;; # wrk cells only
        --no-capacity) wrk=0 ;;
        -h | --help)
            sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            echo
            exec python3 loadtest/bench/run.py --help
            ;;
    esac
done

# ZooKeeper and etcd for the lock section's zk:// and etcd:// backends (full mode only: the smoke
# run stays short). services.sh prints `export ZOOKEEPER_URL=...` / `export ETCD_URL=...` for them.
with_services=""
[[ "$smoke" -eq 1 || "$lock_servers" -eq 0 ]] || with_services="zookeeper,etcd"

# Stop the services at the end only if this script is the one that started them.
running="$(WITH="$with_services" bash scripts/services.sh status 2>/dev/null | grep -c 'running (pid' || true)"
started_services=0
[[ "$running" -ge 1 ]] || started_services=1
# Same for the Redlock / Cluster servers of the lockkit section (scripts/lock-servers.sh).
started_lock_servers=0

child=""
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local rc=$?
    if [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
    if [[ "$started_lock_servers" -eq 1 && "${KEEP_SERVICES:-0}" != 1 ]]; then
        bash scripts/lock-servers.sh down || rc=1
    fi
    if [[ "$started_services" -eq 1 && "${KEEP_SERVICES:-0}" != 1 ]]; then
        WITH="$with_services" bash scripts/services.sh down || rc=1
    fi
    exit "$rc"
}
on_exit cleanup

t0=$SECONDS
# PostgreSQL and Redis start now. ZooKeeper, etcd (WITH) and the lock servers are only installed
# here: the runner starts them in its lock section, after the head to head with rslock
# (--start-lock-servers), so that they do not idle on the same cores through the seckill cells or
# the head to head. `env` prints the export lines of all of them (REDIS_URL, DATABASE_URL,
# ZOOKEEPER_URL, ETCD_URL); a lock backend whose URL stays unset is reported "not run".
bash scripts/services.sh up >/dev/null
WITH="$with_services" bash scripts/services.sh install
services_env="$(WITH="$with_services" bash scripts/services.sh env)"
eval "$services_env"
# BENCH_DATABASE_URL / BENCH_REDIS_URL: another database (or Redis db) on those same servers, e.g.
# to run a commit's binary next to a working tree whose migrations are already applied to the
# default one. They must exist; the seckill instances migrate the database themselves.
export DATABASE_URL="${BENCH_DATABASE_URL:-$DATABASE_URL}" REDIS_URL="${BENCH_REDIS_URL:-$REDIS_URL}"
runner_args=()
if [[ "$lock_servers" -eq 1 ]]; then
    # 5 Redlock masters, a 3-master cluster and a Sentinel set on loopback; run.py reads
    # LOCKKIT_REDLOCK_URL, LOCKKIT_CLUSTER_URL and LOCKKIT_SENTINEL_URL (smoke: one short lockctl
    # pass on each).
    bash scripts/lock-servers.sh status >/dev/null 2>&1 || started_lock_servers=1
    eval "$(bash scripts/lock-servers.sh env)"
    runner_args=(--start-lock-servers "$with_services")
fi

# The smoke run checks correctness, not speed: it reuses the dev build of `make test`.
# BENCH_SKIP_BUILD=1 runs the binaries already built (the runner looks in CARGO_TARGET_DIR), e.g.
# from a worktree of a commit while the main tree is being edited.
if [[ "$smoke" -eq 1 ]]; then
    export BENCH_PROFILE=debug
    build=(cargo_build dev -p seckill -p lockctl)
else
    export BENCH_PROFILE=release
    build=(cargo_build release -p seckill -p lockctl)
fi
if [[ "${BENCH_SKIP_BUILD:-0}" == 1 ]]; then
    log "BENCH_SKIP_BUILD=1: not running ${build[*]} (binaries from ${CARGO_TARGET_DIR:-target}/$BENCH_PROFILE)"
else
    log "${build[*]}"
    "${build[@]}"
fi

pip_ensure psycopg 'psycopg[binary]>=3.1'

# scripts/k6.sh installs k6 v1.1.x if it is missing, then runs `k6 run --help` here.
[[ "$k6" -eq 0 ]] || bash scripts/k6.sh --help >/dev/null
# wrk drives the capacity cells (loadtest/wrk/).
[[ "$wrk" -eq 0 ]] || command -v wrk >/dev/null || apt_install wrk

if [[ "$smoke" -eq 0 && "$peers" -eq 1 ]]; then
    log "loadtest/peers/setup.sh"
    bash loadtest/peers/setup.sh
fi
log "prerequisites ready in $((SECONDS - t0)) s"

# In the background so that INT/TERM reach this script's traps, which stop the runner (it then
# stops its seckill instances itself).
t1=$SECONDS
python3 loadtest/bench/run.py "$@" "${runner_args[@]}" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null || true' INT TERM
status=0
while :; do
    if wait "$child"; then status=0; else status=$?; fi
    kill -0 "$child" 2>/dev/null || break
done
child=""
log "runner finished in $((SECONDS - t1)) s (exit $status)"
exit "$status"
