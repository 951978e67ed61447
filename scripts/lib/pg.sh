# shellcheck shell=bash
# PostgreSQL for the project: where its binaries are, and a project-owned server. This is the one
# place both are written: services.sh and, through scripts/server.sh, the chaos suite start
# PostgreSQL here, and the chaos runner and the bench read the PG_BIN exported here. Source it
# after scripts/lib.sh.
#
#   PG_BIN               the newest /usr/lib/postgresql/<version>/bin (override by exporting PG_BIN)
#   PG_SUPERUSER         the superuser initdb creates (seckill), trusted on loopback
#   as_pg CMD...         runs CMD as the `postgres` user when root (PostgreSQL refuses to run as
#                        root); `cd /` first: the caller's directory may not be readable by postgres
#   pg_start DIR PORT    initdb DIR/data once, start it on 127.0.0.1:PORT (log DIR/pg.log, socket
#                        DIR/sock), wait until it accepts connections; nothing to do if it runs.
#                        Writes DIR/postgres.pid and DIR/postgres.addr
#   pg_stop DIR [MODE]   pg_ctl -m fast stop (open transactions abort, clients are disconnected);
#                        MODE immediate is a crash: no checkpoint, recovery at the next start
#   pg_pid DIR           the postmaster's live pid, or nothing
#   pg_ready PORT        the server on PORT accepts connections
#   pg_ensure_db PORT DB creates database DB owned by the superuser unless it exists
#
# SERVICES_TIMEOUT bounds every wait (seconds, default 60).

if [[ -z "${PG_BIN:-}" ]]; then
    PG_BIN="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
    PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
fi
export PG_BIN
PG_SUPERUSER=seckill

as_pg() {
    if [[ "$(id -u)" -eq 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

pg_pid() {
    local pid
    pid="$(read_pid "$1/data/postmaster.pid")"
    if [[ -n "$pid" ]] && pid_is "$pid" postgres; then
        echo "$pid"
    fi
}

pg_ready() {
    # -U/-d: without them the probe logs "role root does not exist" on every call.
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$1" -U "$PG_SUPERUSER" -d postgres -t 2 >/dev/null 2>&1
}

# As root, the server runs as `postgres`, which needs search (x) permission on every directory
# above DIR. A repository under a private home directory (e.g. /root, mode 700) fails this.
pg_check_reachable() {
    local dir="$1" blocked=() mode owner group digit pg_groups
    [[ "$(id -u)" -eq 0 ]] || return 0
    if as_pg test -x "$dir" && as_pg test -w "$dir"; then
        return 0
    fi
    # Walk up to / and name every directory whose own mode bits deny search to postgres
    # (testing as postgres would also flag everything below the first blocker).
    pg_groups=" $(id -Gn postgres) "
    while :; do
        read -r mode owner group < <(stat -c '%a %U %G' "$dir")
        mode="${mode: -3}"
        if [[ "$owner" == postgres ]]; then digit="${mode:0:1}"
        elif [[ "$pg_groups" == *" $group "* ]]; then digit="${mode:1:1}"
        else digit="${mode:2:1}"
        fi
        (( digit & 1 )) || blocked=("$dir" "${blocked[@]}")
        [[ "$dir" != / ]] || break
        dir="$(dirname "$dir")"
    done
    log "ERROR: PostgreSQL refuses to run as root, so it runs as user 'postgres', which cannot"
    log "reach $1. Directories it cannot search:"
    for dir in "${blocked[@]}"; do
        log "    $dir  ($(stat -c '%A %U:%G' "$dir"))"
    done
    log "Fix: chmod o+x on those directories (e.g. chmod o+x ${blocked[0]:-<dir>}),"
    log "or clone the repository into a world-traversable place such as /work or /srv."
    exit 1
}

pg_prepare_dirs() {
    local dir="$1"
    # The parent must be traversable by postgres whatever the umask.
    install -d -m 0755 "$(dirname "$dir")"
    if [[ "$(id -u)" -eq 0 ]]; then
        id -u postgres >/dev/null 2>&1 || die "user 'postgres' does not exist (normally created by the postgresql package)"
        install -d -m 0755 -o postgres -g postgres "$dir"
        install -d -m 0700 -o postgres -g postgres "$dir/sock"
        # A tree left over from a copy or a non-root run would have the wrong owner.
        if [[ -d "$dir/data" && "$(stat -c %U "$dir/data")" != postgres ]]; then
            chown -R postgres:postgres "$dir"
        fi
        pg_check_reachable "$dir"
    else
        install -d -m 0755 "$dir"
        install -d -m 0700 "$dir/sock"
    fi
}

# Deal with a postmaster.pid left by a server that did not shut down cleanly. PostgreSQL removes
# a stale one itself when its pid is gone, but refuses to start while that pid still exists,
# which here happens in two harmless cases:
#  - the old postmaster is a <defunct> zombie not yet reaped (wait a little for it);
#  - the pid now belongs to an unrelated process (reused after a reboot): the file is stale.
pg_clear_stale_lock() {
    local data="$1/data" old deadline
    old="$(read_pid "$data/postmaster.pid")"
    [[ -n "$old" ]] || return 0
    deadline=$((SECONDS + ${SERVICES_TIMEOUT:-60}))
    while pid_zombie "$old"; do
        [[ $SECONDS -lt $deadline ]] || die "old postmaster (pid $old) is still an unreaped zombie"
        sleep 0.2
    done
    if [[ -e "/proc/$old" ]] && ! pid_is "$old" postgres; then
        log "removing stale postmaster.pid (pid $old is not a postgres process)"
        rm -f "$data/postmaster.pid"
    fi
}

pg_start() {
    local dir="$1" port="$2" pid deadline timeout="${SERVICES_TIMEOUT:-60}"
    pg_prepare_dirs "$dir"
    if [[ ! -s "$dir/data/PG_VERSION" ]]; then
        log "initdb $dir/data"
        rm -rf "$dir/data" # a half-initialised directory from an interrupted initdb
        # C.UTF-8 always exists on Debian; relying on $LANG would fail if it is not generated.
        # Its chatter goes to a log, shown only if it fails.
        if ! as_pg "$PG_BIN/initdb" -D "$dir/data" -U "$PG_SUPERUSER" --auth=trust -E UTF8 \
            --locale=C.UTF-8 >"$dir/initdb.log" 2>&1; then
            cat "$dir/initdb.log" >&2
            die "initdb failed"
        fi
    fi
    pid="$(pg_pid "$dir")"
    if [[ -n "$pid" ]] && pg_ready "$port"; then
        log "postgres already running (pid $pid) on 127.0.0.1:$port"
        return 0
    fi
    if [[ -z "$pid" ]]; then
        port_open "$port" && die "port $port is in use by a process this project did not start"
        pg_clear_stale_lock "$dir"
        log "starting postgres on 127.0.0.1:$port"
        # Light tuning for a test box; durability stays on (fsync=on) so figures measured against
        # it are honest. The log prefix carries the SQLSTATE, which the chaos suite quotes.
        # Quoted paths: pg_ctl hands -o to a shell.
        as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/pg.log" -w -t "$timeout" \
            -o "-p $port -c listen_addresses=127.0.0.1 -k '$dir/sock' -c max_connections=300 -c shared_buffers=256MB -c fsync=on -c log_line_prefix='%m [%p] %e '" \
            start </dev/null >&2 || die_with_log "$dir/pg.log" "pg_ctl start failed"
    fi
    deadline=$((SECONDS + timeout))
    until pg_ready "$port"; do
        [[ -n "$(pg_pid "$dir")" ]] || die_with_log "$dir/pg.log" "postgres is not running"
        [[ $SECONDS -lt $deadline ]] || die_with_log "$dir/pg.log" "postgres did not become ready on 127.0.0.1:$port in time"
        sleep 0.2
    done
    pg_pid "$dir" >"$dir/postgres.pid"
    printf '127.0.0.1:%s\n' "$port" >"$dir/postgres.addr"
    log "postgres ready on 127.0.0.1:$port (pid $(pg_pid "$dir"))"
}

pg_stop() {
    local dir="$1" mode="${2:-fast}" pid
    pid="$(pg_pid "$dir")"
    rm -f "$dir/postgres.pid" "$dir/postgres.addr"
    [[ -n "$pid" ]] || return 0
    if ! as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m "$mode" -w -t "${SERVICES_TIMEOUT:-60}" stop </dev/null >&2; then
        log "ERROR: pg_ctl stop failed; see $dir/pg.log"
        return 1
    fi
    log "postgres stopped ($mode, pid $pid)"
}

pg_ensure_db() {
    local port="$1" db="$2"
    local psql=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U "$PG_SUPERUSER" -d postgres -tA)
    if [[ "$("${psql[@]}" -c "select 1 from pg_database where datname = '$db'")" != "1" ]]; then
        log "creating database $db owned by $PG_SUPERUSER"
        "${psql[@]}" -c "create database \"$db\" owner \"$PG_SUPERUSER\"" >&2 || die "could not create database $db"
    fi
}
