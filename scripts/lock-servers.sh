#!/usr/bin/env bash
# Extra Redis servers for lockkit's multi-node backends (used by scripts/bench.sh):
#   - 5 independent masters for Redlock          127.0.0.1:6401-6405
#   - a Redis Cluster of 3 masters (no replicas)  127.0.0.1:6411-6413 (bus ports +10000)
#   - Sentinel: a master and its replica          127.0.0.1:6421-6422
#     watched by 3 Sentinels (quorum 2) as "lockkit" 127.0.0.1:6426-6428
#
#   scripts/lock-servers.sh up       start whatever is not running (idempotent); prints export lines
#   scripts/lock-servers.sh down     stop the servers this script started (by pid file)
#   scripts/lock-servers.sh status   say what is running; exit 0 only if every server is up
#   scripts/lock-servers.sh env      print the export lines only:  eval "$(scripts/lock-servers.sh env)"
#                                    LOCKKIT_REDLOCK_URL=redlock://...  LOCKKIT_CLUSTER_URL=redis+cluster://...
#                                    LOCKKIT_SENTINEL_URL=redis+sentinel://.../lockkit
#
# No persistence (the cluster's nodes.conf is recreated on every start); files under
# <repo>/.run/lock-servers/<name>-<port>/. Loopback only. Settings (environment):
#   LOCK_SERVERS_REDLOCK_PORTS   default "6401 6402 6403 6404 6405"
#   LOCK_SERVERS_CLUSTER_PORTS   default "6411 6412 6413"
#   LOCK_SERVERS_SENTINEL_DATA_PORTS  default "6421 6422" (the first starts as the master)
#   LOCK_SERVERS_SENTINEL_PORTS  default "6426 6427 6428"
#   SERVICES_TIMEOUT             seconds to wait for a server to start or stop (default 60)
# Progress goes to stderr; stdout carries only the export lines.
set -euo pipefail

SCRIPT_TAG=lock-servers
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=lib/redis.sh
source "$ROOT/scripts/lib/redis.sh"

BASE="$ROOT/.run/lock-servers"
read -r -a REDLOCK_PORTS <<<"${LOCK_SERVERS_REDLOCK_PORTS:-6401 6402 6403 6404 6405}"
read -r -a CLUSTER_PORTS <<<"${LOCK_SERVERS_CLUSTER_PORTS:-6411 6412 6413}"
read -r -a SENTINEL_DATA_PORTS <<<"${LOCK_SERVERS_SENTINEL_DATA_PORTS:-6421 6422}"
read -r -a SENTINEL_PORTS <<<"${LOCK_SERVERS_SENTINEL_PORTS:-6426 6427 6428}"
SENTINEL_SERVICE=lockkit
TIMEOUT="${SERVICES_TIMEOUT:-60}"

join_hosts() {
    local out="" port
    for port in "$@"; do out+="${out:+,}127.0.0.1:$port"; done
    printf '%s' "$out"
}

print_env() {
    printf 'export LOCKKIT_REDLOCK_URL=redlock://%s\n' "$(join_hosts "${REDLOCK_PORTS[@]}")"
    printf 'export LOCKKIT_CLUSTER_URL=redis+cluster://%s\n' "$(join_hosts "${CLUSTER_PORTS[@]}")"
    printf 'export LOCKKIT_SENTINEL_URL=redis+sentinel://%s/%s\n' "$(join_hosts "${SENTINEL_PORTS[@]}")" "$SENTINEL_SERVICE"
}

dir_of() { printf '%s/%s-%s' "$BASE" "$1" "$2"; }   # kind port

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
    for port in "${REDLOCK_PORTS[@]}"; do redis_start "$(dir_of redlock "$port")" "$port"; done
}

cluster_up() {
    local port all_running=1 deadline
    for port in "${CLUSTER_PORTS[@]}"; do
        [[ -n "$(redis_pid "$(dir_of cluster "$port")")" ]] || all_running=0
    done
    if [[ "$all_running" -eq 1 ]] && cluster_ok; then
        return 0
    fi
    # A partial or broken cluster is rebuilt from scratch: no persistence, nothing to keep.
    for port in "${CLUSTER_PORTS[@]}"; do redis_stop "$(dir_of cluster "$port")" "$port"; done
    for port in "${CLUSTER_PORTS[@]}"; do
        redis_start "$(dir_of cluster "$port")" "$port" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000
    done
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

# The first data port starts as the master, the others as its replicas; the Sentinels are told
# about the master only and find the replicas themselves. A Sentinel that is (re)started here
# gets a fresh configuration naming the first port: after a failover, `down` then `up`.
sentinel_up() {
    local master="${SENTINEL_DATA_PORTS[0]}" port deadline
    redis_start "$(dir_of sentinel-data "$master")" "$master"
    for port in "${SENTINEL_DATA_PORTS[@]:1}"; do
        redis_start "$(dir_of sentinel-data "$port")" "$port" --replicaof 127.0.0.1 "$master"
    done
    for port in "${SENTINEL_PORTS[@]}"; do
        redis_start "$(dir_of sentinel "$port")" "$port" --sentinel "$SENTINEL_SERVICE" "$master" 2 5000 60000
    done
    deadline=$((SECONDS + TIMEOUT))
    until sentinel_ok; do
        [[ $SECONDS -lt $deadline ]] || die "the Sentinel set did not come up (replicas in sync, a master named) within ${TIMEOUT}s"
        sleep 0.1
    done
}

# Every replica in sync with the master that the first Sentinel names.
sentinel_ok() {
    local port
    timeout 2 redis-cli -h 127.0.0.1 -p "${SENTINEL_PORTS[0]}" sentinel get-master-addr-by-name "$SENTINEL_SERVICE" 2>/dev/null \
        | grep -q . || return 1
    for port in "${SENTINEL_DATA_PORTS[@]}"; do
        timeout 2 redis-cli -h 127.0.0.1 -p "$port" info replication 2>/dev/null | tr -d '\r' \
            | grep -qE '^(role:master|master_link_status:up)$' || return 1
    done
}

status() {
    local kind port pid rc=0
    for kind in redlock cluster sentinel_data sentinel; do
        local -n ports="${kind^^}_PORTS"
        for port in "${ports[@]}"; do
            pid="$(redis_pid "$(dir_of "${kind//_/-}" "$port")")"
            if [[ -n "$pid" ]] && redis_ping "$port"; then
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
    if [[ "$rc" -eq 0 ]] && ! sentinel_ok; then
        echo "sentinel: servers up but a replica is not in sync or no master is named"
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
        sentinel_up
        log "ready: redlock on ${REDLOCK_PORTS[*]}, cluster on ${CLUSTER_PORTS[*]}, sentinel data on ${SENTINEL_DATA_PORTS[*]} and sentinels on ${SENTINEL_PORTS[*]}"
        print_env
        ;;
    down)
        rc=0
        for port in "${REDLOCK_PORTS[@]}"; do redis_stop "$(dir_of redlock "$port")" "$port" || rc=1; done
        for port in "${CLUSTER_PORTS[@]}"; do redis_stop "$(dir_of cluster "$port")" "$port" || rc=1; done
        for port in "${SENTINEL_PORTS[@]}"; do redis_stop "$(dir_of sentinel "$port")" "$port" || rc=1; done
        for port in "${SENTINEL_DATA_PORTS[@]}"; do redis_stop "$(dir_of sentinel-data "$port")" "$port" || rc=1; done
        exit "$rc"
        ;;
    status)
        status
        ;;
    env)
        print_env
        ;;
    -h | --help | help)
        sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
        ;;
    *)
        sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
