#!/usr/bin/env bash
# Project-owned Redis and PostgreSQL for tests and the demo.
#
#   scripts/services.sh up       install (if needed) and start both; prints export lines
#   WITH=zookeeper,etcd scripts/services.sh up   also ZooKeeper (:2191) and etcd (:2389), for
#                                lockkit's zk:// and etcd:// backends (ZOOKEEPER_URL, ETCD_URL)
#   scripts/services.sh down     stop every instance this project started (by pid file)
#   scripts/services.sh status   say what is running
#   scripts/services.sh env      print the export lines only:  eval "$(scripts/services.sh env)"
#
# Everything lives under <repo>/.run/ and listens on 127.0.0.1 only, on ports chosen not to
# collide with system instances (Redis 6379, PostgreSQL 5432):
#   REDIS_PORT        (default 6390)
#   PG_PORT           (default 5440)
#   ZK_PORT, ETCD_PORT (default 2191, 2389; etcd's peer port is ETCD_PORT+1)
#   SERVICES_TIMEOUT  seconds to wait for a server to start or stop (default 60)
#
# Progress goes to stderr; stdout carries only the export lines, so
# `eval "$(scripts/services.sh up)"` works too.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="$ROOT/.run"

REDIS_PORT="${REDIS_PORT:-6390}"
PG_PORT="${PG_PORT:-5440}"
TIMEOUT="${SERVICES_TIMEOUT:-60}"

REDIS_DIR="$RUN_DIR/redis"
REDIS_PIDFILE="$REDIS_DIR/redis.pid"
REDIS_LOG="$REDIS_DIR/redis.log"

PG_DIR="$RUN_DIR/pg"
PG_DATA="$PG_DIR/data"
PG_SOCK="$PG_DIR/sock"
PG_LOG="$PG_DIR/pg.log"
PG_USER="seckill"
PG_DB="seckill"

REDIS_URL="redis://127.0.0.1:${REDIS_PORT}"
DATABASE_URL="postgres://${PG_USER}@127.0.0.1:${PG_PORT}/${PG_DB}"

# ---------------------------------------------------------------------------------------------
# helpers

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }

is_root() { [[ "$(id -u)" -eq 0 ]]; }

print_env() {
    printf 'export REDIS_URL=%s\n' "$REDIS_URL"
    printf 'export DATABASE_URL=%s\n' "$DATABASE_URL"
    coordination_env
}


# ---------------------------------------------------------------------------------------------
# installation

# shellcheck source=lib/proc.sh
source "$ROOT/scripts/lib/proc.sh"
# shellcheck source=lib/pg.sh
source "$ROOT/scripts/lib/pg.sh"
# shellcheck source=lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
# shellcheck source=lib/coordination.sh
source "$ROOT/scripts/lib/coordination.sh"

ensure_installed() {
    local missing=()
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        missing+=(redis-server redis-tools)
    fi
    if [[ ! -x "$PG_BIN/initdb" ]]; then
        missing+=(postgresql-15)
    fi
    # Build dependencies of the workspace: native TLS (lockkit's `tls` feature) links OpenSSL.
    local pkg
    for pkg in pkg-config libssl-dev; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [[ "${#missing[@]}" -gt 0 ]] || return 0

    if ! is_root; then
        die "missing packages: ${missing[*]}
    install them with:  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    fi
    # Note: on a machine with an init system these packages may also start their own default
    # instances (6379 / 5432). We never use or touch those.
    apt_install "${missing[@]}"

    command -v redis-server >/dev/null 2>&1 || die "redis-server still missing after install"
    [[ -x "$PG_BIN/initdb" ]] || die "$PG_BIN/initdb still missing after install"
}

# ---------------------------------------------------------------------------------------------
# Redis

redis_pid() {
    local pid
    pid="$(read_pid "$REDIS_PIDFILE")"
    if [[ -n "$pid" ]] && pid_is "$pid" redis-server; then
        echo "$pid"
    fi
}

redis_ping() {
    [[ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" == "PONG" ]]
}

redis_fail() {
    log "$1"
    if [[ -s "$REDIS_LOG" ]]; then
        log "last lines of $REDIS_LOG:"
        tail -n 30 "$REDIS_LOG" >&2
    fi
    exit 1
}

redis_up() {
    local pid deadline
    mkdir -p "$REDIS_DIR"
    pid="$(redis_pid)"

    if [[ -z "$pid" ]]; then
        rm -f "$REDIS_PIDFILE"   # stale, if any
        if port_open "$REDIS_PORT"; then
            die "port $REDIS_PORT is in use by a process this project did not start (no live pid in $REDIS_PIDFILE); stop it or set REDIS_PORT"
        fi
        log "starting redis on 127.0.0.1:$REDIS_PORT"
        # No persistence: test data is disposable. DEBUG is allowed from loopback so tests
        # can use DEBUG SLEEP to simulate a stalled server (Redis 7 refuses it by default).
        redis-server \
            --port "$REDIS_PORT" --bind 127.0.0.1 \
            --save '' --appendonly no \
            --daemonize yes \
            --enable-debug-command local \
            --pidfile "$REDIS_PIDFILE" --logfile "$REDIS_LOG" --dir "$REDIS_DIR" \
            </dev/null >&2 || redis_fail "redis-server failed to start"
    elif redis_ping; then
        log "redis already running (pid $pid) on 127.0.0.1:$REDIS_PORT"
        return 0
    fi

    # Readiness is judged by the port, not the process list. The daemonised child writes the
    # pid file a moment after the launcher returns, so a missing pid only counts after a grace.
    local started=$SECONDS
    deadline=$((SECONDS + TIMEOUT))
    until redis_ping; do
        if [[ -z "$(redis_pid)" && $((SECONDS - started)) -ge 3 ]]; then
            redis_fail "redis-server exited during start-up"
        fi
        [[ $SECONDS -lt $deadline ]] || redis_fail "redis did not answer PING on 127.0.0.1:$REDIS_PORT within ${TIMEOUT}s"
        sleep 0.2
    done
    log "redis ready (pid $(redis_pid))"
}

redis_down() {
    local pid deadline
    pid="$(redis_pid)"
    if [[ -z "$pid" ]]; then
        rm -f "$REDIS_PIDFILE"
        log "redis: not running"
        return 0
    fi
    log "stopping redis (pid $pid)"
    kill "$pid" 2>/dev/null || true
    # Wait on the port: the process may linger as <defunct> after it has let go of it.
    deadline=$((SECONDS + TIMEOUT))
    while port_open "$REDIS_PORT" && [[ -n "$(redis_pid)" ]]; do
        if [[ $SECONDS -ge $deadline ]]; then
            log "ERROR: redis (pid $pid) still up ${TIMEOUT}s after SIGTERM; see $REDIS_LOG"
            return 1
        fi
        sleep 0.2
    done
    rm -f "$REDIS_PIDFILE"
    log "redis stopped"
}

redis_status() {
    local pid
    pid="$(redis_pid)"
    if [[ -n "$pid" ]] && redis_ping; then
        echo "redis:    running (pid $pid) on 127.0.0.1:$REDIS_PORT  [$REDIS_URL]"
    elif [[ -n "$pid" ]]; then
        echo "redis:    process $pid alive but not answering on 127.0.0.1:$REDIS_PORT"
    elif port_open "$REDIS_PORT"; then
        echo "redis:    not running (port $REDIS_PORT is used by a process this project did not start)"
    else
        echo "redis:    not running"
    fi
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL

pg_pid() {
    local pid
    pid="$(read_pid "$PG_DATA/postmaster.pid")"
    if [[ -n "$pid" ]] && pid_is "$pid" postgres; then
        echo "$pid"
    fi
}

pg_ready() {
    # -U/-d: without them the probe logs "role root does not exist" on every call.
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres -t 2 >/dev/null 2>&1
}

pg_fail() {
    log "$1"
    if [[ -s "$PG_LOG" ]]; then
        log "last lines of $PG_LOG:"
        tail -n 30 "$PG_LOG" >&2
    fi
    exit 1
}

# As root, the server runs as `postgres`, which needs search (x) permission on every directory
# above .run/pg. A repository under a private home directory (e.g. /root, mode 700) fails this.
pg_check_reachable() {
    is_root || return 0
    if as_pg test -x "$PG_DIR" && as_pg test -w "$PG_DIR"; then
        return 0
    fi
    # Walk up to / and name every directory whose own mode bits deny search to postgres
    # (testing as postgres would also flag everything below the first blocker).
    local dir="$PG_DIR" blocked=() mode owner group digit pg_groups
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
    log "reach $PG_DIR. Directories it cannot search:"
    for dir in "${blocked[@]}"; do
        log "    $dir  ($(stat -c '%A %U:%G' "$dir"))"
    done
    log "Fix: chmod o+x on those directories (e.g. chmod o+x ${blocked[0]:-<dir>}),"
    log "or clone the repository into a world-traversable place such as /work or /srv."
    exit 1
}

pg_prepare_dirs() {
    # .run itself must be traversable by postgres whatever the umask.
    install -d -m 0755 "$RUN_DIR"
    if is_root; then
        id -u postgres >/dev/null 2>&1 || die "user 'postgres' does not exist (normally created by the postgresql-15 package)"
        install -d -m 0755 -o postgres -g postgres "$PG_DIR"
        install -d -m 0700 -o postgres -g postgres "$PG_SOCK"
        # A tree left over from a copy or a non-root run would have the wrong owner.
        if [[ -d "$PG_DATA" && "$(stat -c %U "$PG_DATA")" != postgres ]]; then
            chown -R postgres:postgres "$PG_DIR"
        fi
        pg_check_reachable
    else
        install -d -m 0755 "$PG_DIR"
        install -d -m 0700 "$PG_SOCK"
    fi
}

# Deal with a postmaster.pid left by a server that did not shut down cleanly. PostgreSQL
# removes a stale one itself when its pid is gone, but refuses to start while that pid still
# exists, which here happens in two harmless cases:
#  - the old postmaster is a <defunct> zombie not yet reaped (wait a little for it);
#  - the pid now belongs to an unrelated process (reused after a reboot): the file is stale.
pg_clear_stale_lock() {
    local old deadline
    old="$(read_pid "$PG_DATA/postmaster.pid")"
    [[ -n "$old" ]] || return 0
    deadline=$((SECONDS + TIMEOUT))
    while pid_zombie "$old"; do
        [[ $SECONDS -lt $deadline ]] || die "old postmaster (pid $old) is still an unreaped zombie after ${TIMEOUT}s"
        sleep 0.2
    done
    if [[ -e "/proc/$old" ]] && ! pid_is "$old" postgres; then
        log "removing stale postmaster.pid (pid $old is not a postgres process)"
        rm -f "$PG_DATA/postmaster.pid"
    fi
}

pg_up() {
    local pid deadline started=1
    pg_prepare_dirs

    if [[ ! -s "$PG_DATA/PG_VERSION" ]]; then
        log "initdb $PG_DATA"
        rm -rf "$PG_DATA"   # a half-initialised directory from an interrupted initdb
        # C.UTF-8 always exists on Debian; relying on $LANG would fail if it is not generated.
        # Its chatter goes to a log, shown only if it fails.
        if ! as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U "$PG_USER" --auth=trust -E UTF8 \
            --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1; then
            cat "$PG_DIR/initdb.log" >&2
            die "initdb failed"
        fi
    fi

    pid="$(pg_pid)"
    if [[ -z "$pid" ]]; then
        if port_open "$PG_PORT"; then
            die "port $PG_PORT is in use by a process this project did not start; stop it or set PG_PORT"
        fi
        pg_clear_stale_lock
        log "starting postgres on 127.0.0.1:$PG_PORT"
        # Light tuning for a test box; durability stays on (fsync=on) so figures measured
        # against it are honest. Quoted paths: pg_ctl hands -o to a shell.
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t "$TIMEOUT" \
            -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k '$PG_SOCK' -c max_connections=300 -c shared_buffers=256MB -c fsync=on" \
            start </dev/null >&2 || pg_fail "pg_ctl start failed"
    elif pg_ready; then
        log "postgres already running (pid $pid) on 127.0.0.1:$PG_PORT"
        started=0
    fi

    deadline=$((SECONDS + TIMEOUT))
    until pg_ready; do
        [[ -n "$(pg_pid)" ]] || pg_fail "postgres is not running"
        [[ $SECONDS -lt $deadline ]] || pg_fail "postgres did not become ready on 127.0.0.1:$PG_PORT within ${TIMEOUT}s"
        sleep 0.2
    done

    # The bootstrap superuser is $PG_USER (initdb -U), so it owns the database it creates.
    local psql=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres -tA)
    if [[ "$("${psql[@]}" -c "select 1 from pg_database where datname = '$PG_DB'")" != "1" ]]; then
        log "creating database $PG_DB owned by $PG_USER"
        "${psql[@]}" -c "create database \"$PG_DB\" owner \"$PG_USER\"" >&2 \
            || die "could not create database $PG_DB"
    fi
    [[ "$started" -eq 0 ]] || log "postgres ready (pid $(pg_pid))"
}

pg_down() {
    local pid
    pid="$(pg_pid)"
    if [[ -z "$pid" ]]; then
        log "postgres: not running"
        return 0
    fi
    log "stopping postgres (pid $pid)"
    if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t "$TIMEOUT" stop </dev/null >&2; then
        log "ERROR: pg_ctl stop failed; see $PG_LOG"
        return 1
    fi
    log "postgres stopped"
}

pg_status() {
    local pid
    pid="$(pg_pid)"
    if [[ -n "$pid" ]] && pg_ready; then
        echo "postgres: running (pid $pid) on 127.0.0.1:$PG_PORT  [$DATABASE_URL]"
    elif [[ -n "$pid" ]]; then
        echo "postgres: process $pid alive but not answering on 127.0.0.1:$PG_PORT"
    elif port_open "$PG_PORT"; then
        echo "postgres: not running (port $PG_PORT is used by a process this project did not start)"
    else
        echo "postgres: not running"
    fi
}

# ---------------------------------------------------------------------------------------------

usage() {
    sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

case "${1:-}" in
    up)
        ensure_installed
        redis_up
        pg_up
        coordination_up
        print_env
        ;;
    down)
        # Stop both even if one fails; report failure at the end.
        rc=0
        redis_down || rc=1
        if [[ -x "$PG_BIN/pg_ctl" ]]; then pg_down || rc=1; fi
        coordination_down || rc=1
        exit "$rc"
        ;;
    status)
        if command -v redis-cli >/dev/null 2>&1; then redis_status; else echo "redis:    not installed"; fi
        if [[ -x "$PG_BIN/pg_isready" ]]; then pg_status; else echo "postgres: not installed"; fi
        coordination_status
        ;;
    env)
        print_env
        ;;
    -h | --help | help)
        usage
        ;;
    *)
        usage
        exit 2
        ;;
esac
