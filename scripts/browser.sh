#!/usr/bin/env bash
# Headless Chromium for the sale page's browser test (services/seckill/tests/api/browser.rs).
#
#   scripts/browser.sh install   install Debian's `chromium` if no Chromium is found (as root)
#   scripts/browser.sh path      print the Chromium executable's path, or exit 1
#
# `CHROMIUM=/path/to/chrome` overrides the lookup (both commands honour it).
# Progress goes to stderr; stdout carries only the path, so `"$(scripts/browser.sh path)"` works.
set -euo pipefail

SCRIPT_TAG=browser
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---------------------------------------------------------------------------------------------
# helpers

is_root() { [[ "$(id -u)" -eq 0 ]]; }

# The executable: $CHROMIUM if set, else the first of the usual names on PATH.
chromium_path() {
    if [[ -n "${CHROMIUM:-}" ]]; then
        [[ -x "$CHROMIUM" ]] || return 1
        printf '%s\n' "$CHROMIUM"
        return 0
    fi
    local name path
    for name in chromium chromium-browser; do
        if path="$(command -v "$name" 2>/dev/null)" && [[ -n "$path" ]]; then
            printf '%s\n' "$path"
            return 0
        fi
    done
    return 1
}

# ---------------------------------------------------------------------------------------------
# installation (scripts/lib/apt.sh)

APT_INSTALL_FLAGS="--no-install-recommends"

ensure_installed() {
    local path
    if path="$(chromium_path)"; then
        log "chromium already installed: $path"
        return 0
    fi
    [[ -z "${CHROMIUM:-}" ]] || die "CHROMIUM=$CHROMIUM is not an executable file"
    if ! is_root; then
        die "chromium is missing
    install it with:  sudo apt-get update && sudo apt-get install -y chromium"
    fi
    # fonts-liberation: a metric-compatible sans-serif, so screenshots show readable text.
    apt_install chromium fonts-liberation
    path="$(chromium_path)" || die "chromium still missing after install"
    log "chromium installed: $path ($("$path" --version 2>/dev/null || echo 'version unknown'))"
}

# ---------------------------------------------------------------------------------------------

usage() {
    sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

case "${1:-}" in
    install)
        ensure_installed
        ;;
    path)
        if ! chromium_path; then
            log "chromium not found; run:  bash scripts/browser.sh install"
            exit 1
        fi
        ;;
    -h | --help | help)
        usage
        ;;
    *)
        usage
        exit 2
        ;;
esac
