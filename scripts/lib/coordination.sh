# shellcheck shell=bash
# ZooKeeper and etcd for lockkit's coordination-service backends, started only when asked
# (`WITH=zookeeper,etcd scripts/services.sh up`). Source it after scripts/lib.sh and
# defining `RUN_DIR` and `TIMEOUT`.
#
# ZooKeeper 3.8 (Debian `zookeeper`, on the JVM) standalone on 127.0.0.1:$ZK_PORT (default 2191),
# tickTime 500 ms, so sessions may last 1 s to 10 s. etcd 3.4 (Debian `etcd-server`) on
# 127.0.0.1:$ETCD_PORT (default 2389, peer port +1). Both keep data under .run/ and run in the
# background with a pid file; `down` stops them by pid.

ZK_PORT="${ZK_PORT:-2191}"
ETCD_PORT="${ETCD_PORT:-2389}"
ZK_DIR="$RUN_DIR/zookeeper"
ETCD_DIR="$RUN_DIR/etcd"
ZOOKEEPER_URL="zk://127.0.0.1:${ZK_PORT}/lockkit"
ETCD_URL="etcd://127.0.0.1:${ETCD_PORT}"

# Which of zookeeper, etcd the WITH list names (comma or space separated).
wants() {
    [[ ",${WITH:-}," == *",$1,"* || " ${WITH:-} " == *" $1 "* ]]
}

coordination_install() {
    local missing=()
    if wants zookeeper && [[ ! -e /usr/share/java/zookeeper.jar ]]; then missing+=(zookeeper); fi
    if wants etcd; then
        command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
        command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
    fi
    [[ "${#missing[@]}" -eq 0 ]] || APT_INSTALL_FLAGS="--no-install-recommends" apt_install "${missing[@]}"
}

# The four-letter word `srvr` answers once the server serves.
zk_ready() {
    [[ "$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ZK_PORT; printf srvr >&3; cat <&3" 2>/dev/null)" == *"Mode:"* ]]
}

zk_up() {
    local pid
    pid="$(read_pid "$ZK_DIR/zookeeper.pid")"
    if pid_is "$pid" java && zk_ready; then
        log "zookeeper already running (pid $pid) on 127.0.0.1:$ZK_PORT"
        return 0
    fi
    port_open "$ZK_PORT" && die "port $ZK_PORT is in use by a process this project did not start; set ZK_PORT"
    mkdir -p "$ZK_DIR/data"
    cat >"$ZK_DIR/zoo.cfg" <<CFG
tickTime=500
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat
CFG
    log "starting zookeeper on 127.0.0.1:$ZK_PORT"
    setsid java -Xmx256m -cp "/usr/share/java/*:/etc/zookeeper/conf" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZK_DIR/zoo.cfg" \
        </dev/null >"$ZK_DIR/zookeeper.log" 2>&1 &
    echo $! >"$ZK_DIR/zookeeper.pid"
    await_ready zookeeper "$ZK_DIR/zookeeper" java zk_ready
}

# Waits until `$4` (a readiness check) passes for the server whose files are `$2.pid` and
# `$2.log` (process name `$3`); dies with the log's tail if it exits or takes too long.
await_ready() {
    local what="$1" base="$2" comm="$3" ready="$4" deadline=$((SECONDS + TIMEOUT))
    until "$ready"; do
        pid_starting "$(read_pid "$base.pid")" "$comm" || die_with_log "$base.log" "$what exited during start-up"
        [[ $SECONDS -lt $deadline ]] || die "$what was not ready within ${TIMEOUT}s; see $base.log"
        sleep 0.3
    done
    log "$what ready (pid $(read_pid "$base.pid"))"
}

etcd_ready() {
    ETCDCTL_API=3 timeout 3 etcdctl --endpoints "http://127.0.0.1:$ETCD_PORT" endpoint health >/dev/null 2>&1
}

etcd_up() {
    local pid peer=$((ETCD_PORT + 1))
    pid="$(read_pid "$ETCD_DIR/etcd.pid")"
    if pid_is "$pid" etcd && etcd_ready; then
        log "etcd already running (pid $pid) on 127.0.0.1:$ETCD_PORT"
        return 0
    fi
    port_open "$ETCD_PORT" && die "port $ETCD_PORT is in use by a process this project did not start; set ETCD_PORT"
    mkdir -p "$ETCD_DIR"
    log "starting etcd on 127.0.0.1:$ETCD_PORT"
    setsid etcd --name lockkit --data-dir "$ETCD_DIR/data" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "lockkit=http://127.0.0.1:$peer" \
        </dev/null >"$ETCD_DIR/etcd.log" 2>&1 &
    echo $! >"$ETCD_DIR/etcd.pid"
    await_ready etcd "$ETCD_DIR/etcd" etcd etcd_ready
}

# Stops the server whose pid file is $1 (process name $2, port $3), if this project started it.
coordination_stop() {
    local pidfile="$1" name="$2" port="$3" pid
    pid="$(read_pid "$pidfile")"
    if ! pid_is "$pid" "$name"; then
        rm -f "$pidfile"
        return 0
    fi
    log "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    wait_port_closed "$port" "$pid" "$name" "$TIMEOUT" || return 1
    rm -f "$pidfile"
}

coordination_up() {
    coordination_install
    if wants zookeeper; then zk_up; fi
    if wants etcd; then etcd_up; fi
}

# Stops whatever of the two is running, asked for or not.
coordination_down() {
    local rc=0
    coordination_stop "$ZK_DIR/zookeeper.pid" java "$ZK_PORT" || rc=1
    coordination_stop "$ETCD_DIR/etcd.pid" etcd "$ETCD_PORT" || rc=1
    return "$rc"
}

coordination_env() {
    if wants zookeeper; then printf 'export ZOOKEEPER_URL=%s\n' "$ZOOKEEPER_URL"; fi
    if wants etcd; then printf 'export ETCD_URL=%s\n' "$ETCD_URL"; fi
}

coordination_status() {
    local pid
    pid="$(read_pid "$ZK_DIR/zookeeper.pid")"
    if pid_is "$pid" java && zk_ready; then echo "zookeeper: running (pid $pid) [$ZOOKEEPER_URL]"; else echo "zookeeper: not running"; fi
    pid="$(read_pid "$ETCD_DIR/etcd.pid")"
    if pid_is "$pid" etcd && etcd_ready; then echo "etcd:     running (pid $pid) [$ETCD_URL]"; else echo "etcd:     not running"; fi
}
