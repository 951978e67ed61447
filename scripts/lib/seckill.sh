# shellcheck shell=bash
# A seckill instance, started the one way the project starts it: the binary with its settings in
# the environment, listening where SECKILL_LISTEN says (default 127.0.0.1:0, a free port) and
# writing the address it bound to DIR/NAME.addr (SECKILL_ADDRESS_FILE), so no caller scrapes a
# log for its port. The demo, the bench and the chaos suite start instances here, through
# scripts/server.sh; both ways write the pid to DIR/NAME.pid. Source it after scripts/lib.sh.
#
#   seckill_run DIR NAME     exec the instance in the foreground (a supervisor's child), its
#                            output appended to DIR/NAME.log
#   seckill_start DIR NAME   start it in the background (DIR/NAME.pid) and wait until it answers
#                            /readyz; prints its base URL
#   seckill_stop DIR NAME    SIGCONT (a paused one too), SIGTERM (requests drain, locks are
#                            released), SIGKILL after SECKILL_STOP_TIMEOUT seconds (default 10)
#   seckill_url DIR NAME     http://ADDRESS from DIR/NAME.addr
#
# SECKILL_BIN is the binary (default target/release/seckill); every other SECKILL_*, REDIS_URL,
# DATABASE_URL and RUST_LOG variable of the caller's environment reaches the instance.

SECKILL_BIN="${SECKILL_BIN:-$ROOT/target/release/seckill}"

seckill_url() {
    local address
    address="$(head -n 1 "$1/$2.addr" 2>/dev/null)" || return 1
    [[ -n "$address" ]] && printf 'http://%s\n' "$address"
}

seckill_prepare() {
    local dir="$1" name="$2"
    [[ -x "$SECKILL_BIN" ]] || die "$SECKILL_BIN not built (cargo build --release -p seckill)"
    mkdir -p "$dir"
    rm -f "$dir/$name.addr"
    export SECKILL_LISTEN="${SECKILL_LISTEN:-127.0.0.1:0}"
    export SECKILL_ADDRESS_FILE="$dir/$name.addr"
}

seckill_run() {
    seckill_prepare "$1" "$2"
    exec_server "$1" "$2" "" "$SECKILL_BIN" </dev/null
}

# `GET /readyz` answered 200, through bash's /dev/tcp (no curl needed).
seckill_ready() {
    local address="$1"
    [[ "$(timeout 2 bash -c "exec 3<>/dev/tcp/${address%:*}/${address##*:}
        printf 'GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n' '$address' >&3; head -n 1 <&3" 2>/dev/null)" == "HTTP/1."?" 200"* ]]
}

seckill_start() {
    local dir="$1" name="$2" pid address deadline
    pid="$(read_pid "$dir/$name.pid")"
    if [[ -n "$pid" ]] && pid_is "$pid" seckill; then
        log "seckill $name already running (pid $pid)"
        seckill_url "$dir" "$name"
        return 0
    fi
    seckill_prepare "$dir" "$name"
    setsid "$SECKILL_BIN" </dev/null >>"$dir/$name.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/$name.pid"
    deadline=$((SECONDS + ${SERVICES_TIMEOUT:-60}))
    while :; do
        pid_starting "$pid" || die_with_log "$dir/$name.log" "seckill $name exited during start-up"
        address="$(head -n 1 "$dir/$name.addr" 2>/dev/null || true)"
        [[ -z "$address" ]] || ! seckill_ready "$address" || break
        [[ $SECONDS -lt $deadline ]] || die "seckill $name not ready in time; see $dir/$name.log"
        sleep 0.1
    done
    log "seckill $name ready on http://$address (pid $pid)"
    seckill_url "$dir" "$name"
}

seckill_stop() {
    local dir="$1" name="$2" pid deadline
    pid="$(read_pid "$dir/$name.pid")"
    if [[ -n "$pid" ]] && pid_is "$pid" seckill; then
        kill -CONT "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null || true
        deadline=$((SECONDS + ${SECKILL_STOP_TIMEOUT:-10}))
        while pid_is "$pid" seckill && [[ $SECONDS -lt $deadline ]]; do sleep 0.1; done
        if pid_is "$pid" seckill; then
            log "seckill $name (pid $pid) ignored SIGTERM; SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        log "stopped seckill $name (pid $pid)"
    fi
    rm -f "$dir/$name.pid" "$dir/$name.addr"
}
