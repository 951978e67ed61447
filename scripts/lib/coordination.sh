# shellcheck shell=bash
# ZooKeeper and etcd for lockkit's coordination-service backends, started only when asked
# (`WITH=zookeeper,etcd scripts/services.sh up`; scripts/chaos.sh starts its own pair). Source it
# after scripts/lib.sh and defining `RUN_DIR`. The servers' command lines are in
# lib/zookeeper.sh and lib/etcd.sh.
#
# ZooKeeper standalone on 127.0.0.1:$ZK_PORT (default 2191), tickTime 500 ms, so sessions may
# last 1 s to 10 s. etcd on 127.0.0.1:$ETCD_PORT (default 2389, peer port +1). Both keep data
# under $RUN_DIR and run in the background with a pid file; `down` stops them by pid.

# shellcheck source=lib/zookeeper.sh
source "$ROOT/scripts/lib/zookeeper.sh"
# shellcheck source=lib/etcd.sh
source "$ROOT/scripts/lib/etcd.sh"

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

coordination_up() {
    coordination_install
    if wants zookeeper; then zk_start "$ZK_DIR" "$ZK_PORT"; fi
    if wants etcd; then etcd_start "$ETCD_DIR" "$ETCD_PORT"; fi
}

# Stops whatever of the two is running, asked for or not.
coordination_down() {
    local rc=0
    zk_stop "$ZK_DIR" "$ZK_PORT" || rc=1
    etcd_stop "$ETCD_DIR" "$ETCD_PORT" || rc=1
    return "$rc"
}

coordination_env() {
    if wants zookeeper; then printf 'export ZOOKEEPER_URL=%s\n' "$ZOOKEEPER_URL"; fi
    if wants etcd; then printf 'export ETCD_URL=%s\n' "$ETCD_URL"; fi
}

coordination_status() {
    local pid
    pid="$(read_pid "$ZK_DIR/zookeeper.pid")"
    if pid_is "$pid" java && zk_ready "$ZK_PORT"; then echo "zookeeper: running (pid $pid) [$ZOOKEEPER_URL]"; else echo "zookeeper: not running"; fi
    pid="$(read_pid "$ETCD_DIR/etcd.pid")"
    if pid_is "$pid" etcd && etcd_ready "$ETCD_PORT"; then echo "etcd:     running (pid $pid) [$ETCD_URL]"; else echo "etcd:     not running"; fi
}
