#!/usr/bin/env bash
# Start and stop local seckill instances against the project's Redis and PostgreSQL.
#
#   scripts/instances.sh start N   start N instances (release binary), each on a free loopback
#                                  port (BASE_PORT=8081 fixes them at 8081, 8082, ...)
#   scripts/instances.sh stop      stop the instances this script started (by pid file)
#   scripts/instances.sh urls      print their base URLs, comma-separated
#   scripts/instances.sh token     print the admin token they accept
#
# Each instance is started by scripts/lib/seckill.sh, the one way the project starts one; state
# lives in .run/instances/: its pid, bound address (seckill-N.addr) and log, and the admin token
# (generated once, mode 600; SECKILL_ADMIN_TOKEN overrides it). Other SECKILL_* variables in the
# environment (lease, deadline, pool size) are passed through to the instances.
set -euo pipefail

SCRIPT_TAG=instances
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=lib/seckill.sh
source "$ROOT/scripts/lib/seckill.sh"

DIR="$ROOT/.run/instances"

token() {
    mkdir -p "$DIR"
    if [[ -n "${SECKILL_ADMIN_TOKEN:-}" ]]; then
        printf '%s' "$SECKILL_ADMIN_TOKEN"
        return
    fi
    if [[ ! -s "$DIR/admin-token" ]]; then
        (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/admin-token")
    fi
    cat "$DIR/admin-token"
}

start() {
    local count="$1" i
    eval "$(bash "$ROOT/scripts/services.sh" env)"
    SECKILL_ADMIN_TOKEN="$(token)"
    export SECKILL_ADMIN_TOKEN REDIS_URL DATABASE_URL RUST_LOG="${RUST_LOG:-warn}"
    for ((i = 1; i <= count; i++)); do
        if [[ -n "${BASE_PORT:-}" ]]; then
            SECKILL_LISTEN="127.0.0.1:$((BASE_PORT + i - 1))" seckill_start "$DIR" "seckill-$i" >/dev/null
        else
            seckill_start "$DIR" "seckill-$i" >/dev/null
        fi
    done
}

stop() {
    local pidfile
    shopt -s nullglob
    for pidfile in "$DIR"/seckill-*.pid; do
        seckill_stop "$DIR" "$(basename "$pidfile" .pid)"
    done
}

urls() {
    local addr urls=()
    shopt -s nullglob
    for addr in "$DIR"/seckill-*.addr; do urls+=("$(seckill_url "$DIR" "$(basename "$addr" .addr)")"); done
    (IFS=,; echo "${urls[*]}")
}

case "${1:-}" in
    start) start "${2:-2}" ;;
    stop) stop ;;
    urls) urls ;;
    token) token; echo ;;
    *) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
