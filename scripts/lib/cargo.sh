# shellcheck shell=bash
# Builds of the workspace's binaries for the end-to-end scripts (sourced by scripts/lib.sh).
#
#   cargo_build PROFILE ARGS...   cargo build --profile PROFILE ARGS... (e.g. dev -p seckill -p
#                                 lockctl); a dev build under `make test` (CARGO_SHARE_TEST_BUILD=1,
#                                 set by scripts/test.sh) is the test step's build instead, which
#                                 has built every binary already
#
# Why: cargo unifies a dependency's features over what it builds. The test step builds the whole
# workspace with every feature and every target, dev-dependencies included; a build of a few
# packages asks for fewer features of tokio, actix-web, redis and the like, so it compiled about 15
# crates again: 57 to 58 s each for the smoke run and the chaos suite in CI, and again for the
# compose check's runner. The same selection as the test step's finds everything built, and its
# binaries are the ones the integration tests ran (seckill with its optional TLS support).

cargo_build() {
    local profile="$1"
    shift
    if [[ "$profile" == dev && "${CARGO_SHARE_TEST_BUILD:-0}" == 1 ]]; then
        log "the test step's build, for $*: cargo build --profile dev --workspace --all-features --all-targets"
        cargo build --profile dev --workspace --all-features --all-targets
    else
        cargo build --profile "$profile" "$@"
    fi
}
