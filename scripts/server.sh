#!/usr/bin/env bash
# The one way to start each server the project runs, for every caller: services.sh,
# lock-servers.sh and chaos.sh source the same libraries; the demo, the bench runner, the chaos
# suite and lockkit's tests call this script.
#
#   scripts/server.sh redis run|start|stop DIR PORT [REDIS-ARG...]   scripts/lib/redis.sh
#   scripts/server.sh postgres start|stop DIR PORT [DB | MODE]        scripts/lib/pg.sh
#   scripts/server.sh zookeeper run|start|stop DIR PORT [TICK_MS]     scripts/lib/zookeeper.sh
#   scripts/server.sh etcd run|start|stop DIR PORT                    scripts/lib/etcd.sh
#   scripts/server.sh pgbouncer run DIR PORT UPSTREAM-URL             scripts/lib/pgbouncer.sh
#   scripts/server.sh faultproxy run DIR UPSTREAM [PORT]              scripts/lib/faultproxy.sh
#   scripts/server.sh seckill run DIR NAME                            scripts/lib/seckill.sh
#
# Every server writes its pid and its address (`127.0.0.1:PORT`) to DIR/KIND.pid and DIR/KIND.addr
# (seckill: DIR/NAME.pid, DIR/NAME.addr), and logs to DIR. `run` execs the server in the
# foreground, so a supervisor that spawned this script holds the server's own pid (to pause it,
# kill -9 it and reap it). `start` starts it in the background, waits until it serves, and prints
# its pid. `stop` stops what `start` started, by its pid file (postgres:
# MODE immediate is a crash). A postgres `start` with DB also creates that database. Everything
# listens on 127.0.0.1 only.
set -euo pipefail

SCRIPT_TAG=server
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[[ $# -ge 4 ]] || usage
kind="$1" action="$2" dir="$3" arg="$4"
shift 4
mkdir -p "$(dirname "$dir")"
dir="$(cd "$(dirname "$dir")" && pwd)/$(basename "$dir")"

case "$kind:$action" in
    redis:run | redis:start | redis:stop)
        # shellcheck source=lib/redis.sh
        source "$ROOT/scripts/lib/redis.sh"
        "redis_$action" "$dir" "$arg" "$@"
        [[ "$action" != start ]] || redis_pid "$dir"
        ;;
    postgres:start)
        # shellcheck source=lib/pg.sh
        source "$ROOT/scripts/lib/pg.sh"
        pg_start "$dir" "$arg"
        [[ $# -eq 0 ]] || pg_ensure_db "$arg" "$1"
        pg_pid "$dir"
        ;;
    postgres:stop)
        # shellcheck source=lib/pg.sh
        source "$ROOT/scripts/lib/pg.sh"
        pg_stop "$dir" "$@"
        ;;
    zookeeper:run | zookeeper:start | zookeeper:stop)
        # shellcheck source=lib/zookeeper.sh
        source "$ROOT/scripts/lib/zookeeper.sh"
        "zk_$action" "$dir" "$arg" "$@"
        [[ "$action" != start ]] || read_pid "$dir/zookeeper.pid"
        ;;
    etcd:run | etcd:start | etcd:stop)
        # shellcheck source=lib/etcd.sh
        source "$ROOT/scripts/lib/etcd.sh"
        "etcd_$action" "$dir" "$arg"
        [[ "$action" != start ]] || read_pid "$dir/etcd.pid"
        ;;
    pgbouncer:run)
        # shellcheck source=lib/pgbouncer.sh
        source "$ROOT/scripts/lib/pgbouncer.sh"
        pgbouncer_run "$dir" "$arg" "$@"
        ;;
    faultproxy:run)
        # shellcheck source=lib/faultproxy.sh
        source "$ROOT/scripts/lib/faultproxy.sh"
        faultproxy_run "$dir" "$arg" "$@"
        ;;
    seckill:run)
        # shellcheck source=lib/seckill.sh
        source "$ROOT/scripts/lib/seckill.sh"
        seckill_run "$dir" "$arg"
        ;;
    *) usage ;;
esac
