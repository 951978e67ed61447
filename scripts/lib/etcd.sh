# shellcheck shell=bash
# A project-owned etcd 3.4 (Debian `etcd-server`): one member, loopback only, clients on PORT and
# peers on PORT+1, its data and log in DIR. This is the one place its command line is written:
# services.sh and chaos.sh start their shared servers here, lockkit's tests their own through
# scripts/server.sh. Source it after scripts/lib.sh.
#
#   etcd_run DIR PORT     exec it in the foreground (a supervisor's child)
#   etcd_start DIR PORT   start it in the background (DIR/etcd.pid), wait until it is healthy
#   etcd_stop DIR PORT    SIGTERM by the pid file; returns once the port is closed
#   etcd_ready PORT       `etcdctl endpoint health` passes

etcd_ready() {
    ETCDCTL_API=3 timeout 3 etcdctl --endpoints "http://127.0.0.1:$1" endpoint health >/dev/null 2>&1
}

# etcd grants no lease shorter than 1.5 election timeouts, rounded up to whole seconds: with the
# default timeout (1000 ms) a 1 s lease is granted 2 s, and its holder's lock outlives a frozen
# holder by a second more than asked, which a pause of the chaos suite then does not outlast. One
# member on loopback elects nobody, so a 500 ms timeout (heartbeat 50 ms) costs nothing and lets
# etcd grant the 1 s leases that lockkit's tests and the chaos suite ask for.
etcd_command() {
    local dir="$1" client="http://127.0.0.1:$2" peer="http://127.0.0.1:$(($2 + 1))"
    ETCD_COMMAND=(etcd --name lockkit --data-dir "$dir/data"
        --heartbeat-interval 50 --election-timeout 500
        --listen-client-urls "$client" --advertise-client-urls "$client"
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer"
        --initial-cluster "lockkit=$peer")
}

etcd_run() {
    etcd_command "$1" "$2"
    exec_server "$1" etcd "$2" "${ETCD_COMMAND[@]}"
}

etcd_start() {
    etcd_command "$1" "$2"
    spawn_server "$1" etcd "$2" etcd etcd_ready "${ETCD_COMMAND[@]}"
}

etcd_stop() {
    stop_server "$1" etcd "$2" etcd
}
