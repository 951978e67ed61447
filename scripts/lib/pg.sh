# shellcheck shell=bash
# Where PostgreSQL's binaries are, and how to run them as root, in one place for the scripts
# (services.sh, chaos.sh, and through the exported PG_BIN the chaos runner and the bench).
#
#   PG_BIN     the newest /usr/lib/postgresql/<version>/bin (override by exporting PG_BIN)
#   as_pg CMD  runs CMD as the `postgres` user when root (PostgreSQL refuses to run as root);
#              `cd /` first: the caller's working directory may not be readable by postgres

if [[ -z "${PG_BIN:-}" ]]; then
    PG_BIN="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
    PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
fi
export PG_BIN

as_pg() {
    if [[ "$(id -u)" -eq 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}
