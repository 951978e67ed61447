# shellcheck shell=bash
# A project-owned redis-server: loopback only, no persistence, `DEBUG` allowed from loopback
# (tests stall a server with DEBUG SLEEP), every file in its own directory. This is the one place
# its command line is written: services.sh, lock-servers.sh and, through scripts/server.sh, the
# chaos suite and lockkit's tests (Redlock masters, cluster nodes, Sentinels) start Redis here.
# Both ways write DIR/redis.pid and DIR/redis.addr. Source it after scripts/lib.sh.
#
#   redis_run DIR PORT [ARG...]     exec redis-server in the foreground (a supervisor's child)
#   redis_start DIR PORT [ARG...]   start it in the background, wait for PING;
#                                   nothing to do if DIR/redis.pid names a live server
#   redis_stop DIR PORT             SIGTERM by the pid file; returns once the port is closed
#   redis_pid DIR                   the live pid in DIR/redis.pid, or nothing
#   redis_ping PORT                 127.0.0.1:PORT answers PING (no redis-cli needed)
#
# Extra ARGs go to redis-server (e.g. --cluster-enabled yes). With
# `--sentinel NAME MASTER_PORT QUORUM DOWN_AFTER_MS FAILOVER_TIMEOUT_MS` as the first ARGs, the
# server is a Sentinel monitoring 127.0.0.1:MASTER_PORT as NAME, from a fresh DIR/sentinel.conf
# (Sentinel rewrites that file as it learns). SERVICES_TIMEOUT bounds every wait (seconds,
# default 60).

redis_command() {
    local dir="$1" port="$2"
    shift 2
    local -a conf=()
    if [[ "${1:-}" == --sentinel ]]; then
        [[ $# -ge 6 ]] || die "--sentinel NAME MASTER_PORT QUORUM DOWN_AFTER_MS FAILOVER_TIMEOUT_MS"
        printf 'sentinel monitor %s 127.0.0.1 %s %s\nsentinel down-after-milliseconds %s %s\nsentinel failover-timeout %s %s\n' \
            "$2" "$3" "$4" "$2" "$5" "$2" "$6" >"$dir/sentinel.conf"
        conf=("$dir/sentinel.conf" --sentinel)
        shift 6
    fi
    REDIS_COMMAND=(redis-server "${conf[@]}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no
        --enable-debug-command local --dir "$dir" --logfile "$dir/redis.log" "$@")
}

redis_ping() {
    [[ "$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf 'PING\r\n' >&3; head -c 5 <&3" 2>/dev/null)" == "+PONG" ]]
}

redis_pid() {
    local pid
    pid="$(read_pid "$1/redis.pid")"
    if [[ -n "$pid" ]] && pid_is "$pid" redis-server; then
        echo "$pid"
    fi
}

redis_run() {
    mkdir -p "$1"
    redis_command "$@"
    exec_server "$1" redis "$2" "${REDIS_COMMAND[@]}" --daemonize no </dev/null
}

redis_start() {
    local -a REDIS_COMMAND=()
    mkdir -p "$1"
    # Only a server that is not running starts fresh: a cluster node without its nodes.conf
    # (nothing is persisted), a Sentinel from a new sentinel.conf. A running one keeps both.
    if [[ -z "$(redis_pid "$1")" ]]; then
        rm -f "$1/nodes.conf"
        redis_command "$@"
    fi
    spawn_server "$1" redis "$2" redis-server redis_ping "${REDIS_COMMAND[@]}" --daemonize no
}

redis_stop() {
    stop_server "$1" redis "$2" redis-server
}
