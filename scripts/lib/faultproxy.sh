# shellcheck shell=bash
# The chaos suite's TCP fault proxy (`faultproxy`, loadtest/chaos/src/bin/faultproxy.rs) as a
# process: loopback only, forwarding to UPSTREAM, taking its commands (`pass`, `delay MS`,
# `delay-requests MS`, `blackhole`, `reset`, `stats`, `quit`) on standard input, which is why it
# only runs under a supervisor that holds that pipe. The demo starts it here through
# scripts/server.sh; the chaos suite runs the same proxy in-process. Source it after scripts/lib.sh.
#
#   faultproxy_run DIR UPSTREAM [PORT]   exec it in the foreground on 127.0.0.1:PORT (default 0,
#                                        a free port); it writes the address it bound to
#                                        DIR/faultproxy.addr
#
# FAULTPROXY_BIN is the binary (default target/release/faultproxy).

faultproxy_run() {
    local dir="$1" upstream="$2" port="${3:-0}" bin="${FAULTPROXY_BIN:-$ROOT/target/release/faultproxy}"
    [[ -x "$bin" ]] || die "$bin not built (cargo build --release -p chaos --bin faultproxy)"
    mkdir -p "$dir"
    rm -f "$dir/faultproxy.addr"
    exec_server "$dir" faultproxy "" "$bin" --listen "127.0.0.1:$port" --upstream "$upstream" \
        --address-file "$dir/faultproxy.addr"
}
