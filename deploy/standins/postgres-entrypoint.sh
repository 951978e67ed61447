#!/bin/bash
# What the official postgres image's entrypoint does, for the settings the demo stack uses:
#
#   POSTGRES_PASSWORD         required (unless POSTGRES_HOST_AUTH_METHOD=trust): the superuser's
#   POSTGRES_USER             the superuser's name (default postgres)
#   POSTGRES_DB               a database created on first start (default: POSTGRES_USER)
#   POSTGRES_INITDB_ARGS      extra initdb arguments
#   POSTGRES_HOST_AUTH_METHOD pg_hba method for connections from other hosts (default
#                             scram-sha-256)
#   /docker-entrypoint-initdb.d/*.sql, *.sh   run once, on first start
#
# On first start (an empty $PGDATA) it runs initdb, then a temporary server that listens on the
# Unix socket only while the database is created and the init scripts run, then the real server.
# So a client of the published port never sees a half-initialised database: the compose file's
# healthcheck asks over TCP for that reason. It runs as root only to fix ownership, then as
# postgres.
set -Eeuo pipefail

if [[ "${1:-}" == -* ]]; then
    set -- postgres "$@"
fi

if [[ "${1:-}" != postgres ]]; then
    exec "$@"
fi

if [[ "$(id -u)" == 0 ]]; then
    install -d -o postgres -g postgres -m 0700 "$PGDATA"
    chown -R postgres:postgres "$PGDATA"
    install -d -o postgres -g postgres -m 2777 /var/run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"

psql_init() {
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc "$@"
}

if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
    if [[ -z "${POSTGRES_PASSWORD:-}" && "$POSTGRES_HOST_AUTH_METHOD" != trust ]]; then
        echo "error: database is uninitialized and superuser password is not specified." >&2
        echo "       Set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust)." >&2
        exit 1
    fi
    # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a list of words, as in the official image
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
        ${POSTGRES_INITDB_ARGS:-}
    printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
    # The official image's sample config listens on every address; a `-c` on the command line
    # still overrides it.
    printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"

    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
    export PGPASSWORD="${POSTGRES_PASSWORD:-}"
    if [[ "$POSTGRES_DB" != postgres ]]; then
        psql_init --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
    fi
    shopt -s nullglob
    for f in /docker-entrypoint-initdb.d/*; do
        # shellcheck disable=SC1090  # the init scripts are the user's
        case "$f" in
            *.sh) echo "running $f"; . "$f" ;;
            *.sql) echo "running $f"; psql_init --dbname "$POSTGRES_DB" -f "$f" ;;
            *) echo "ignoring $f" ;;
        esac
    done
    shopt -u nullglob
    unset PGPASSWORD
    pg_ctl -D "$PGDATA" -m fast -w stop
    echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
