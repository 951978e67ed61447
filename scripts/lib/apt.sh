# shellcheck shell=bash
# Idempotent Debian package installation for the project's scripts (sourced by scripts/lib.sh).
# `apt-get update` is slow: it runs only if the existing lists cannot serve the
# packages, or if an install from them fails (stale lists pointing at vanished .debs).
#
#   apt_install PKG...               install (non-interactive); dies if it cannot
#   APT_INSTALL_FLAGS="--no-install-recommends" apt_install PKG...

APT_UPDATED=0

# True if the current package lists offer an install candidate for every package given.
apt_has_candidates() {
    local pkg cand
    for pkg in "$@"; do
        cand="$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')"
        [[ -n "$cand" && "$cand" != "(none)" ]] || return 1
    done
}

apt_update_once() {
    if [[ "$APT_UPDATED" -eq 0 ]]; then
        log "apt-get update"
        apt-get update >&2
        APT_UPDATED=1
    fi
}

apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    local -a flags
    read -r -a flags <<<"${APT_INSTALL_FLAGS:-}"
    apt_has_candidates "$@" || apt_update_once
    log "apt-get install -y ${flags[*]} $*"
    if ! apt-get install -y "${flags[@]}" "$@" >&2; then
        [[ "$APT_UPDATED" -eq 0 ]] || die "apt-get install -y $* failed"
        apt_update_once
        apt-get install -y "${flags[@]}" "$@" >&2 || die "apt-get install -y $* failed"
    fi
}
