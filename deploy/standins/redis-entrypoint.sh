#!/bin/sh
# The official image's behaviour that the demo stack relies on: `redis-server ARGS` runs as the
# redis user with protected mode off (the official image compiles it off; Debian's build keeps
# it on, which refuses password-less clients from other containers); anything else runs as given.
# A config file given as the first argument stays first, as redis-server requires.
set -e
if [ "$1" = redis-server ]; then
    shift
    conf=
    case "${1:-}" in
        "" | -*) ;;
        *) conf="$1"; shift ;;
    esac
    exec setpriv --reuid=redis --regid=redis --init-groups \
        redis-server ${conf:+"$conf"} --protected-mode no "$@"
fi
exec "$@"
