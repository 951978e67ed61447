# shellcheck shell=bash
# A project-owned ZooKeeper 3.8 (Debian `zookeeper`, on the JVM): standalone, loopback only, its
# data, configuration and log in DIR. This is the one place its command line is written:
# services.sh and chaos.sh start their shared servers here, lockkit's tests their own through
# scripts/server.sh. Source it after scripts/lib.sh.
#
#   zk_run DIR PORT [TICK_MS]    exec it in the foreground (a supervisor's child)
#   zk_start DIR PORT [TICK_MS]  start it in the background (DIR/zookeeper.pid), wait until it serves
#   zk_stop DIR PORT             SIGTERM by the pid file; returns once the port is closed
#   zk_ready PORT                the four-letter word `srvr` gets an answer
#
# TICK_MS (default 500) bounds sessions: they may last 2 to 20 ticks.

zk_ready() {
    [[ "$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf srvr >&3; cat <&3" 2>/dev/null)" == *"Mode:"* ]]
}

# zk_command DIR PORT TICK_MS JVM-OPTION...: writes DIR/zoo.cfg and sets ZK_COMMAND.
zk_command() {
    local dir="$1" port="$2" tick="$3"
    shift 3
    mkdir -p "$dir/data"
    cat >"$dir/zoo.cfg" <<CFG
tickTime=$tick
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat
CFG
    ZK_COMMAND=(java "$@" -cp "/usr/share/java/*:/etc/zookeeper/conf"
        org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg")
}

# A supervised server is a test's, short-lived and restarted: the JVM is tuned to start fast
# (client compiler only, serial GC). A background one serves whole runs with the full JIT.
zk_run() {
    zk_command "$1" "$2" "${3:-500}" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
    exec_server "$1" zookeeper "$2" "${ZK_COMMAND[@]}"
}

zk_start() {
    zk_command "$1" "$2" "${3:-500}" -Xmx256m
    spawn_server "$1" zookeeper "$2" java zk_ready "${ZK_COMMAND[@]}"
}

zk_stop() {
    stop_server "$1" zookeeper "$2" java
}
