# shellcheck shell=bash
# Process helpers shared by the project's scripts: pid files, liveness by name, ports (sourced
# by scripts/lib.sh).
#
#   port_open PORT          something accepts TCP connections on 127.0.0.1:PORT
#   read_pid FILE           the first line of a pid file, or nothing
#   pid_is PID NAME         PID is a live (not zombie) process whose comm is NAME
#   pid_zombie PID          PID exited but was not reaped yet
#   wait_port_closed PORT PID NAME TIMEOUT   after a kill: wait until the port is free
#   exec_server DIR NAME PORT CMD...   for `run`: write DIR/NAME.pid (this shell's pid, which exec
#                           keeps) and DIR/NAME.addr (with PORT empty, the server writes that
#                           itself), then exec CMD, its output appended to DIR/NAME.log; the
#                           supervisor that spawned us holds the server's own pid
#   spawn_server DIR NAME PORT COMM READY CMD...   for `start`: CMD in the background (setsid),
#                           the same three files, then wait until READY PORT passes; nothing to
#                           do if DIR/NAME.pid names a live COMM that is READY, and an error if it
#                           names a live COMM that is not (one server per DIR)
#   stop_server DIR NAME PORT COMM   SIGTERM by DIR/NAME.pid; returns once the port is closed
#
# SERVICES_TIMEOUT bounds every wait (seconds, default 60).

port_open() {
    timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

read_pid() {
    if [[ -r "$1" ]]; then
        head -n 1 "$1" 2>/dev/null | tr -d '[:space:]' || true
    fi
}

# Checking the name guards against a stale pid file whose pid has since been reused. A daemon
# killed in a container whose pid 1 does not reap can linger as <defunct>; it holds no port any
# more, so it counts as dead.
pid_is() {
    local pid="$1" name="$2"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    if [[ -d /proc/self ]]; then
        if [[ ! -e "/proc/$pid" ]] || pid_zombie "$pid"; then
            return 1
        fi
        [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name" ]]
    else
        kill -0 "$pid" 2>/dev/null
    fi
}

# For a server this shell spawned in the background a moment ago: alive, whatever its name (until
# it execs, the child is still a copy of this shell, then `setsid`). Being our own child, its pid
# cannot have been reused; once it exits it stays a zombie until reaped.
pid_starting() {
    kill -0 "$1" 2>/dev/null && ! pid_zombie "$1"
}

pid_zombie() {
    local stat state
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    state="${stat##*) }"
    [[ "${state%% *}" == "Z" ]]
}

# Waits on the port, not the process list: a killed process may linger as <defunct> after it
# has let go of the port.
wait_port_closed() {
    local port="$1" pid="$2" name="$3" timeout="$4" deadline
    deadline=$((SECONDS + timeout))
    while port_open "$port" && pid_is "$pid" "$name"; do
        if [[ $SECONDS -ge $deadline ]]; then
            log "ERROR: $name (pid $pid) still up ${timeout}s after SIGTERM"
            return 1
        fi
        sleep 0.2
    done
}

exec_server() {
    local dir="$1" name="$2" port="$3"
    shift 3
    mkdir -p "$dir"
    echo "$$" >"$dir/$name.pid"
    if [[ -n "$port" ]]; then printf '127.0.0.1:%s\n' "$port" >"$dir/$name.addr"; fi
    exec "$@" >>"$dir/$name.log" 2>&1
}

spawn_server() {
    local dir="$1" name="$2" port="$3" comm="$4" ready="$5" pid deadline
    shift 5
    pid="$(read_pid "$dir/$name.pid")"
    if pid_is "$pid" "$comm" && "$ready" "$port"; then
        log "$name already running (pid $pid) on 127.0.0.1:$port"
        return 0
    fi
    # One server per directory: a second one (another port, the same tree) would overwrite the
    # first's pid file, and `down` would then leave the first running, untracked.
    if pid_is "$pid" "$comm"; then
        die "$name from $dir is already running (pid $pid, on $(cat "$dir/$name.addr" 2>/dev/null || echo '?')) but does" \
            "not answer on 127.0.0.1:$port; stop it first, or start the other one from another checkout"
    fi
    port_open "$port" && die "port $port is in use by a process this project did not start (no live pid in $dir/$name.pid)"
    mkdir -p "$dir"
    log "starting $name on 127.0.0.1:$port"
    setsid "$@" </dev/null >"$dir/$name.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/$name.pid"
    printf '127.0.0.1:%s\n' "$port" >"$dir/$name.addr"
    deadline=$((SECONDS + ${SERVICES_TIMEOUT:-60}))
    until "$ready" "$port"; do
        pid_starting "$pid" || die_with_log "$dir/$name.log" "$name exited during start-up"
        [[ $SECONDS -lt $deadline ]] || die "$name was not ready within ${SERVICES_TIMEOUT:-60}s; see $dir/$name.log"
        sleep 0.2
    done
    log "$name ready on 127.0.0.1:$port (pid $pid)"
}

stop_server() {
    local dir="$1" name="$2" port="$3" comm="$4" pid
    pid="$(read_pid "$dir/$name.pid")"
    if pid_is "$pid" "$comm"; then
        log "stopping $name (pid $pid)"
        kill "$pid" 2>/dev/null || true
        wait_port_closed "$port" "$pid" "$comm" "${SERVICES_TIMEOUT:-60}" || return 1
    fi
    rm -f "$dir/$name.pid" "$dir/$name.addr"
}
