#!/usr/bin/env bash
# Start and stop local seckill instances against the project's Redis and PostgreSQL.
#
#   scripts/instances.sh start N   start N instances (release binary) on ports BASE_PORT.. (default 8081)
#   scripts/instances.sh stop      stop the instances this script started (by pid file)
#   scripts/instances.sh urls      print their base URLs, comma-separated
#   scripts/instances.sh token     print the admin token they accept
#
# State lives in .run/instances/: one pid, port and log file per instance, and the admin token
# (generated once, mode 600; SECKILL_ADMIN_TOKEN overrides it). Other SECKILL_* variables in the
# environment (lease, deadline, pool size) are passed through to the instances.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/.run/instances"
BIN="${SECKILL_BIN:-$ROOT/target/release/seckill}"
BASE_PORT="${BASE_PORT:-8081}"

log() { printf '[instances] %s\n' "$*" >&2; }
die() { printf '[instances] ERROR: %s\n' "$*" >&2; exit 1; }

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

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
    local count="$1" i port
    [[ -x "$BIN" ]] || die "$BIN not built (cargo build --release -p seckill)"
    eval "$(bash "$ROOT/scripts/services.sh" env)"
    local admin
    admin="$(token)"
    for ((i = 1; i <= count; i++)); do
        port=$((BASE_PORT + i - 1))
        if alive "$DIR/seckill-$i.pid"; then
            log "seckill-$i already running (pid $(cat "$DIR/seckill-$i.pid"))"
            continue
        fi
        SECKILL_LISTEN="127.0.0.1:$port" SECKILL_ADMIN_TOKEN="$admin" REDIS_URL="$REDIS_URL" DATABASE_URL="$DATABASE_URL" \
            RUST_LOG="${RUST_LOG:-warn}" "$BIN" >"$DIR/seckill-$i.log" 2>&1 &
        echo $! >"$DIR/seckill-$i.pid"
        echo "$port" >"$DIR/seckill-$i.port"
    done
    for ((i = 1; i <= count; i++)); do
        port="$(cat "$DIR/seckill-$i.port")"
        local tries=0
        until curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
            alive "$DIR/seckill-$i.pid" || die "seckill-$i exited; log: $(tail -5 "$DIR/seckill-$i.log")"
            ((++tries < 100)) || die "seckill-$i not ready after 10 s; log: $(tail -5 "$DIR/seckill-$i.log")"
            sleep 0.1
        done
        log "seckill-$i ready on http://127.0.0.1:$port (pid $(cat "$DIR/seckill-$i.pid"))"
    done
}

stop() {
    local pidfile pid
    shopt -s nullglob
    for pidfile in "$DIR"/seckill-*.pid; do
        pid="$(cat "$pidfile")"
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            # Graceful: in-flight requests drain and release their locks.
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
            log "stopped $(basename "$pidfile" .pid) (pid $pid)"
        fi
        rm -f "$pidfile" "${pidfile%.pid}.port"
    done
}

urls() {
    local portfile urls=()
    shopt -s nullglob
    for portfile in "$DIR"/seckill-*.port; do urls+=("http://127.0.0.1:$(cat "$portfile")"); done
    (IFS=,; echo "${urls[*]}")
}

case "${1:-}" in
    start) start "${2:-2}" ;;
    stop) stop ;;
    urls) urls ;;
    token) token; echo ;;
    *) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
