# shellcheck shell=bash
# Process helpers shared by the project's scripts: pid files, liveness by name, ports (sourced
# by scripts/lib.sh).
#
#   port_open PORT          something accepts TCP connections on 127.0.0.1:PORT
#   read_pid FILE           the first line of a pid file, or nothing
#   pid_is PID NAME         PID is a live (not zombie) process whose comm is NAME
#   pid_zombie PID          PID exited but was not reaped yet
#   wait_port_closed PORT PID NAME TIMEOUT   after a kill: wait until the port is free

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

# Like pid_is, for a server spawned with `setsid NAME ...` a moment ago: until setsid execs the
# server, the pid's name is still `setsid`.
pid_starting() {
    pid_is "$1" "$2" || pid_is "$1" setsid
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
