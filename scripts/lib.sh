# shellcheck shell=bash
# What every script of the project starts with. Set SCRIPT_TAG (the "[tag]" of its messages) and
# source this first. It also sources the small shared helpers, lib/proc.sh (pids and ports),
# lib/apt.sh (Debian packages), lib/pip.sh (Python packages) and lib/cargo.sh (dev builds); the
# servers' own libraries (lib/redis.sh, lib/pg.sh, lib/zookeeper.sh, lib/etcd.sh, lib/pgbouncer.sh,
# lib/faultproxy.sh, lib/seckill.sh) and lib/coordination.sh are sourced where needed.
#
#   ROOT            the repository's top directory
#   log MSG...      "[tag] MSG" on stderr (stdout stays free for what a script prints)
#   die MSG...      "[tag] ERROR: MSG" on stderr, then exit $DIE_STATUS (default 1)
#   die_with_log LOG MSG...   die, after the last 30 lines of a server's LOG file
#   on_exit FUNC    FUNC runs when the script exits, however it exits: INT and TERM become
#                   ordinary exits (130, 143) so that FUNC still stops what the script started

# shellcheck disable=SC2034  # used by the scripts that source this
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { printf '[%s] %s\n' "${SCRIPT_TAG:-script}" "$*" >&2; }

# shellcheck disable=SC2317  # also called from the other libraries
die() {
    printf '[%s] ERROR: %s\n' "${SCRIPT_TAG:-script}" "$*" >&2
    exit "${DIE_STATUS:-1}"
}

die_with_log() {
    local file="$1"
    shift
    if [[ -s "$file" ]]; then
        log "last lines of $file:"
        tail -n 30 "$file" >&2
    fi
    die "$@"
}

on_exit() {
    # shellcheck disable=SC2064  # the function name is fixed now, on purpose
    trap "$1" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# shellcheck source=lib/proc.sh
source "$ROOT/scripts/lib/proc.sh"
# shellcheck source=lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
# shellcheck source=lib/pip.sh
source "$ROOT/scripts/lib/pip.sh"
# shellcheck source=lib/cargo.sh
source "$ROOT/scripts/lib/cargo.sh"
