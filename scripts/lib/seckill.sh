# shellcheck shell=bash
# A seckill instance, started the one way the project starts it: the binary with its settings in
# the environment, listening where SECKILL_LISTEN says (default 127.0.0.1:0, a free port) and
# writing the address it bound to DIR/NAME.addr (SECKILL_ADDRESS_FILE), so no caller scrapes a
# log for its port. The demo, the bench and the chaos suite start instances here, through
# scripts/server.sh; they supervise it (pause, kill, stop) by its pid. Source it after
# scripts/lib.sh.
#
#   seckill_run DIR NAME     exec the instance in the foreground (a supervisor's child), its pid
#                            in DIR/NAME.pid, its output appended to DIR/NAME.log
#
# SECKILL_BIN is the binary (default target/release/seckill); every other SECKILL_*, REDIS_URL,
# DATABASE_URL and RUST_LOG variable of the caller's environment reaches the instance.

seckill_run() {
    local dir="$1" name="$2" bin="${SECKILL_BIN:-$ROOT/target/release/seckill}"
    [[ -x "$bin" ]] || die "$bin not built (cargo build --release -p seckill)"
    mkdir -p "$dir"
    rm -f "$dir/$name.addr"
    export SECKILL_LISTEN="${SECKILL_LISTEN:-127.0.0.1:0}"
    export SECKILL_ADDRESS_FILE="$dir/$name.addr"
    exec_server "$dir" "$name" "" "$bin" </dev/null
}
