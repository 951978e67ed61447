#!/usr/bin/env bash
# Extra Redis servers for lockkit's multi-node backends (used by scripts/bench.sh):
#   - 5 independent masters for Redlock          127.0.0.1:6401-6405
#   - a Redis Cluster of 3 masters (no replicas)  127.0.0.1:6411-6413 (bus ports +10000)
#
#   scripts/lock-servers.sh up       start whatever is not running (idempotent); prints export lines
#   scripts/lock-servers.sh down     stop the servers this script started (by pid file)
#   scripts/lock-servers.sh status   say what is running; exit 0 only if every server is up
#   scripts/lock-servers.sh env      print the export lines only:  eval "$(scripts/lock-servers.sh env)"
#                                    LOCKKIT_REDLOCK_URL=redlock://...  LOCKKIT_CLUSTER_URL=redis+cluster://...
#
# No persistence (the cluster's nodes.conf is recreated on every start); files under
# <repo>/.run/lock-servers/<name>-<port>/. Loopback only. Settings (environment):
#   LOCK_SERVERS_REDLOCK_PORTS   default "6401 6402 6403 6404 6405"
#   LOCK_SERVERS_CLUSTER_PORTS   default "6411 6412 6413"
#   SERVICES_TIMEOUT             seconds to wait for a server to start or stop (default 60)
# Progress goes to stderr; stdout carries only the export lines.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE="$ROOT/.run/lock-servers"
read -r -a REDLOCK_PORTS <<<"${LOCK_SERVERS_REDLOCK_PORTS:-6401 6402 6403 6404 6405}"
read -r -a CLUSTER_PORTS <<<"${LOCK_SERVERS_CLUSTER_PORTS:-6411 6412 6413}"
TIMEOUT="${SERVICES_TIMEOUT:-60}"

log() { printf '[lock-servers] %s\n' "$*" >&2; }
die() { printf '[lock-servers] ERROR: %s\n' "$*" >&2; exit 1; }

join_hosts() {
    local out="" port
    for port in "$@"; do out+="${out:+,}127.0.0.1:$port"; done
    printf '%s' "$out"
}

print_env() {
    printf 'export LOCKKIT_REDLOCK_URL=redlock://%s\n' "$(join_hosts "${REDLOCK_PORTS[@]}")"
    printf 'export LOCKKIT_CLUSTER_URL=redis+cluster://%s\n' "$(join_hosts "${CLUSTER_PORTS[@]}")"
}

# shellcheck source=lib/proc.sh
source "$ROOT/scripts/lib/proc.sh"

dir_of() { printf '%s/%s-%s' "$BASE" "$1" "$2"; }   # kind port

# The live pid of our server kind/port, or nothing.
server_pid() {
    local pidfile pid
    pidfile="$(dir_of "$1" "$2")/redis.pid"
    [[ -r "$pidfile" ]] || return 0
    pid="$(head -n 1 "$pidfile" 2>/dev/null | tr -d '[:space:]' || true)"
    if [[ -n "$pid" ]] && pid_is "$pid" redis-server; then echo "$pid"; fi
}

ping() { [[ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" == "PONG" ]]; }

fail_with_log() {
    log "$1"
    if [[ -s "$2" ]]; then
        log "last lines of $2:"
        tail -n 20 "$2" >&2
    fi
    exit 1
}

# start KIND PORT [extra redis-server args...]: starts it unless our pid file names a live one.
start_server() {
    local kind="$1" port="$2" dir pid
    shift 2
    dir="$(dir_of "$kind" "$port")"
    mkdir -p "$dir"
    pid="$(server_pid "$kind" "$port")"
    if [[ -n "$pid" ]]; then
        return 0
    fi
    rm -f "$dir/redis.pid" "$dir/nodes.conf"
    if port_open "$port"; then
        die "port $port is in use by a process this script did not start (no live pid in $dir/redis.pid); stop it or set LOCK_SERVERS_*_PORTS"
    fi
    log "starting $kind redis-server on 127.0.0.1:$port"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
        --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" "$@" \
        </dev/null >&2 || fail_with_log "redis-server on port $port failed to start" "$dir/redis.log"
}

wait_ready() {
    local kind="$1" port="$2" started=$SECONDS deadline=$((SECONDS + TIMEOUT)) dir
    dir="$(dir_of "$kind" "$port")"
    until ping "$port"; do
        if [[ -z "$(server_pid "$kind" "$port")" && $((SECONDS - started)) -ge 3 ]]; then
            fail_with_log "redis-server on port $port exited during start-up" "$dir/redis.log"
        fi
        [[ $SECONDS -lt $deadline ]] || fail_with_log "redis-server on port $port did not answer within ${TIMEOUT}s" "$dir/redis.log"
        sleep 0.1
    done
}

stop_server() {
    local kind="$1" port="$2" dir pid deadline
    dir="$(dir_of "$kind" "$port")"
    pid="$(server_pid "$kind" "$port")"
    if [[ -z "$pid" ]]; then
        rm -f "$dir/redis.pid" "$dir/nodes.conf"
        return 0
    fi
    kill "$pid" 2>/dev/null || true
    # Wait on the port: the process may linger as <defunct> after it has let go of it.
    deadline=$((SECONDS + TIMEOUT))
    while port_open "$port" && [[ -n "$(server_pid "$kind" "$port")" ]]; do
        if [[ $SECONDS -ge $deadline ]]; then
            log "ERROR: $kind redis-server (pid $pid) on port $port still up ${TIMEOUT}s after SIGTERM"
            return 1
        fi
        sleep 0.1
    done
    rm -f "$dir/redis.pid" "$dir/nodes.conf"
    log "stopped $kind redis-server on port $port (pid $pid)"
}

cluster_ok() {
    local port
    for port in "${CLUSTER_PORTS[@]}"; do
        timeout 2 redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
    done
    # Every node must know all the others (a node restarted on its own would be alone).
    [[ "$(timeout 2 redis-cli -h 127.0.0.1 -p "${CLUSTER_PORTS[0]}" cluster info 2>/dev/null \
        | tr -d '\r' | awk -F: '/^cluster_known_nodes:/ {print $2}')" == "${#CLUSTER_PORTS[@]}" ]]
}

redlock_up() {
    local port
    for port in "${REDLOCK_PORTS[@]}"; do start_server redlock "$port"; done
    for port in "${REDLOCK_PORTS[@]}"; do wait_ready redlock "$port"; done
}

cluster_up() {
    local port all_running=1 deadline
    for port in "${CLUSTER_PORTS[@]}"; do
        [[ -n "$(server_pid cluster "$port")" ]] || all_running=0
    done
    if [[ "$all_running" -eq 1 ]] && cluster_ok; then
        return 0
    fi
    # A partial or broken cluster is rebuilt from scratch: no persistence, nothing to keep.
    for port in "${CLUSTER_PORTS[@]}"; do stop_server cluster "$port"; done
    for port in "${CLUSTER_PORTS[@]}"; do
        start_server cluster "$port" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000
    done
    for port in "${CLUSTER_PORTS[@]}"; do wait_ready cluster "$port"; done
    local -a hosts=()
    for port in "${CLUSTER_PORTS[@]}"; do hosts+=("127.0.0.1:$port"); done
    log "redis-cli --cluster create ${hosts[*]}"
    timeout "$TIMEOUT" redis-cli --cluster create "${hosts[@]}" --cluster-replicas 0 --cluster-yes >"$BASE/cluster-create.log" 2>&1 \
        || { cat "$BASE/cluster-create.log" >&2; die "redis-cli --cluster create failed"; }
    deadline=$((SECONDS + TIMEOUT))
    until cluster_ok; do
        [[ $SECONDS -lt $deadline ]] || die "the cluster did not reach cluster_state:ok within ${TIMEOUT}s"
        sleep 0.1
    done
}

status() {
    local kind port pid rc=0
    for kind in redlock cluster; do
        local -n ports="${kind^^}_PORTS"
        for port in "${ports[@]}"; do
            pid="$(server_pid "$kind" "$port")"
            if [[ -n "$pid" ]] && ping "$port"; then
                echo "$kind: running (pid $pid) on 127.0.0.1:$port"
            else
                echo "$kind: not running on 127.0.0.1:$port"
                rc=1
            fi
        done
    done
    if [[ "$rc" -eq 0 ]] && ! cluster_ok; then
        echo "cluster: servers up but cluster_state is not ok"
        rc=1
    fi
    return "$rc"
}

case "${1:-}" in
    up)
        if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
            die "redis-server/redis-cli not found (scripts/services.sh up installs them)"
        fi
        mkdir -p "$BASE"
        redlock_up
        cluster_up
        log "ready: redlock on ${REDLOCK_PORTS[*]}, cluster on ${CLUSTER_PORTS[*]}"
        print_env
        ;;
    down)
        rc=0
        for port in "${REDLOCK_PORTS[@]}"; do stop_server redlock "$port" || rc=1; done
        for port in "${CLUSTER_PORTS[@]}"; do stop_server cluster "$port" || rc=1; done
        exit "$rc"
        ;;
    status)
        status
        ;;
    env)
        print_env
        ;;
    -h | --help | help)
        sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
        ;;
    *)
        sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
