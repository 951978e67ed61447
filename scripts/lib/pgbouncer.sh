# shellcheck shell=bash
# A project-owned PgBouncer (Debian `pgbouncer`) in transaction pooling mode in front of a
# PostgreSQL: loopback only, trust auth, its files in DIR. PgBouncer refuses to run as root, so as
# root it switches to the `postgres` user; it logs to stderr, which lands in DIR/pgbouncer.log. This is the one place its configuration is written:
# lockkit's tests start theirs through scripts/server.sh. Source it after scripts/lib.sh.
#
#   pgbouncer_run DIR PORT UPSTREAM   exec it in the foreground (a supervisor's child) on
#                                     127.0.0.1:PORT, pooling the database of UPSTREAM (a
#                                     `postgres://USER@HOST:PORT/DB` URL without password)

pgbouncer_run() {
    local dir="$1" port="$2" upstream="$3" user host upstream_port db
    [[ "$upstream" =~ ^postgres(ql)?://([^@/:]+)@([^:/]+):([0-9]+)/([^?]+)$ ]] ||
        die "pgbouncer: upstream must be postgres://USER@HOST:PORT/DB, not $upstream"
    user="${BASH_REMATCH[2]}" host="${BASH_REMATCH[3]}" upstream_port="${BASH_REMATCH[4]}" db="${BASH_REMATCH[5]}"
    mkdir -p "$dir"
    printf '"%s" ""\n' "$user" >"$dir/userlist.txt"
    cat >"$dir/pgbouncer.ini" <<INI
[databases]
$db = host=$host port=$upstream_port dbname=$db user=$user
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 5
max_client_conn = 100
ignore_startup_parameters = extra_float_digits,options
INI
    local -a as_user=()
    if [[ "$(id -u)" -eq 0 ]]; then
        chown -R postgres:postgres "$dir"
        as_user=(-u postgres)
    fi
    exec_server "$dir" pgbouncer "$port" /usr/sbin/pgbouncer "${as_user[@]}" "$dir/pgbouncer.ini"
}
