#!/usr/bin/env bash
# One way to start each server the project runs, for every caller: services.sh, lock-servers.sh
# and instances.sh source the same libraries, and the demo, the bench runner and the chaos suite
# call this script.
#
#   scripts/server.sh redis run|start|stop DIR PORT [REDIS-ARG...]   scripts/lib/redis.sh
#   scripts/server.sh postgres start|stop DIR PORT                    scripts/lib/pg.sh
#   scripts/server.sh seckill run|start|stop DIR NAME                 scripts/lib/seckill.sh
#
# `run` execs the server in the foreground, so a supervisor that spawned this script holds the
# server's own PID (to pause it, kill -9 it and reap it). `start` starts it in the background
# with a pid file in DIR, waits until it serves, and prints its pid (seckill: its base URL, read
# from the address file DIR/NAME.addr). `stop` stops what `start` started, by that pid file.
# Everything listens on 127.0.0.1 only.
set -euo pipefail

SCRIPT_TAG=server
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
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
    postgres:start | postgres:stop)
        # shellcheck source=lib/pg.sh
        source "$ROOT/scripts/lib/pg.sh"
        "pg_$action" "$dir" "$arg"
        [[ "$action" != start ]] || pg_pid "$dir"
        ;;
    seckill:run | seckill:start | seckill:stop)
        # shellcheck source=lib/seckill.sh
        source "$ROOT/scripts/lib/seckill.sh"
        "seckill_$action" "$dir" "$arg"
        ;;
    *) usage ;;
esac
