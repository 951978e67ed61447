#!/usr/bin/env bash
# The chaos suite: fault injection against seckill and lockkit (crate loadtest/chaos).
#
#   scripts/chaos.sh                 full run (`make chaos`): every scenario at full length;
#                                    report in loadtest/results/chaos-latest.{json,md}
#   scripts/chaos.sh --bounded       every scenario shortened (what `make test` runs), but the
#                                    controls on ZooKeeper, etcd and PostgreSQL (full run only);
#                                    report in .run/chaos/results/chaos-bounded.{json,md}
#   scripts/chaos.sh --bounded --only pause,control    a subset (`--list` names them)
#
# Other arguments go to the runner (`--out-dir`, `--prefix`, ...). The suite starts its OWN Redis
# (127.0.0.1:6391) and PostgreSQL (127.0.0.1:5441) under .run/chaos/, never the project's
# 6390 / 5440, and seckill instances on free loopback ports. It builds seckill and the runner
# (release profile for the full run, dev for the bounded one), installs schemathesis into
# .run/chaos/venv, and on exit ends whatever it started, by PID.
#
# ZooKeeper (127.0.0.1:2192) and etcd (:2392) of its own serve the `@zk` and `@etcd` scenarios
# (`pause`, `session-loss` and `control` run on Redis, ZooKeeper, etcd and PostgreSQL).
#
# Environment: CHAOS_PROFILE (dev | release), CHAOS_REDIS_PORT, CHAOS_PG_PORT, CHAOS_ZK_PORT,
# CHAOS_ETCD_PORT, CHAOS_FUZZ_SEED,
# CHAOS_LOCK_WAIT (seconds to wait for another run of the suite in this checkout, default 900).
# Exits non-zero if any scenario failed (or the suite could not run).
set -euo pipefail

SCRIPT_TAG=chaos.sh
DIE_STATUS=2
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=lib/pg.sh
source "$ROOT/scripts/lib/pg.sh"
cd "$ROOT"

WORK=".run/chaos"
VENV="$WORK/venv"
SCHEMATHESIS_SPEC='schemathesis>=4.32,<5'

for arg in "$@"; do
    if [[ "$arg" == -h || "$arg" == --help ]]; then
        sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
    fi
done

# One suite run at a time per checkout: the ports, .run/chaos and the leftovers cleanup are
# shared. `flock -o` holds the lock in the flock process and does not hand it to the servers.
if [[ -z "${CHAOS_LOCKED:-}" ]]; then
    install -d -m 0755 .run "$WORK"
    exec env CHAOS_LOCKED=1 flock -o -w "${CHAOS_LOCK_WAIT:-900}" "$WORK/lock" bash "${BASH_SOURCE[0]}" "$@"
fi

bounded=0
own_out_dir=0
for arg in "$@"; do
    [[ "$arg" != --bounded ]] || bounded=1
    [[ "$arg" != --out-dir* ]] || own_out_dir=1
done

if [[ -n "${CHAOS_PROFILE:-}" ]]; then
    PROFILE="$CHAOS_PROFILE"
elif [[ "$bounded" -eq 1 ]]; then
    PROFILE=dev   # shares its build with `make test` (lib/cargo.sh)
else
    PROFILE=release
fi
case "$PROFILE" in
    dev) TARGET_DIR=target/debug ;;
    release) TARGET_DIR=target/release ;;
    *) die "CHAOS_PROFILE must be dev or release, not $PROFILE" ;;
esac

# ---------------------------------------------------------------------------------------------
# cleanup: end what a suite run started and left behind (pid files `PID COMM`), never by name

cleanup_leftovers() {
    local file pid comm
    if [[ -d "$WORK/pids" ]]; then
        for file in "$WORK"/pids/*.pid; do
            [[ -e "$file" ]] || continue
            read -r pid comm <"$file" || true
            if [[ "$comm" != postgres ]] && pid_is "$pid" "$comm"; then
                log "ending leftover $comm (pid $pid, $(basename "$file"))"
                kill -CONT "$pid" 2>/dev/null || true
                kill -KILL "$pid" 2>/dev/null || true
            fi
            [[ "$comm" == postgres ]] || rm -f "$file"
        done
    fi
    if [[ -n "$(pg_pid "$ROOT/$WORK/pg")" ]]; then
        log "stopping leftover postgres (pid $(pg_pid "$ROOT/$WORK/pg"))"
        pg_stop "$ROOT/$WORK/pg" >/dev/null 2>&1 || true
    fi
    rm -f "$WORK/pids/postgres.pid"
}

# ZooKeeper and etcd of the suite (the `@zk` and `@etcd` scenarios), started by the same
# functions as scripts/services.sh's, on the suite's own ports and directory.
RUN_DIR="$ROOT/$WORK"
ZK_PORT="${CHAOS_ZK_PORT:-2192}"
ETCD_PORT="${CHAOS_ETCD_PORT:-2392}"
WITH=zookeeper,etcd
# shellcheck source=lib/coordination.sh
source "$ROOT/scripts/lib/coordination.sh"

# shellcheck disable=SC2317  # invoked by the traps
end_suite() {
    local rc=$?
    cleanup_leftovers
    coordination_down || true
    exit "$rc"
}
on_exit end_suite

# ---------------------------------------------------------------------------------------------
# prerequisites

ensure_packages() {
    local missing=()
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    [[ -x "$PG_BIN/initdb" ]] || missing+=(postgresql-15)
    python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
    # Building seckill (lockkit's etcd backend) runs protoc.
    command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
    [[ "${#missing[@]}" -gt 0 ]] || return 0
    [[ "$(id -u)" -eq 0 ]] || die "missing packages: ${missing[*]} (sudo apt-get install -y ${missing[*]})"
    apt_install "${missing[@]}"
}

ensure_schemathesis() {
    if [[ -x "$VENV/bin/st" ]]; then
        return 0
    fi
    log "installing $SCHEMATHESIS_SPEC into $VENV"
    python3 -m venv "$VENV" >&2 || return 1
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "$SCHEMATHESIS_SPEC" >&2 || return 1
}

ensure_packages
cleanup_leftovers
install -d -m 0755 .run "$WORK"

started=$SECONDS
log "building seckill and the chaos runner ($PROFILE profile)"
cargo_build "$PROFILE" -p seckill -p chaos --bins >&2
log "built in $((SECONDS - started)) s"

coordination_up
runner_args=(--seckill-bin "$TARGET_DIR/seckill" --work-dir "$WORK"
    --zookeeper-url "zk://127.0.0.1:$ZK_PORT/chaos" --etcd-url "etcd://127.0.0.1:$ETCD_PORT")
if ensure_schemathesis; then
    runner_args+=(--schemathesis "$VENV/bin/st")
else
    log "WARNING: schemathesis could not be installed; the fuzz scenario will fail"
fi
if [[ "$own_out_dir" -eq 0 && "$bounded" -eq 1 ]]; then
    runner_args+=(--out-dir "$WORK/results")
elif [[ "$own_out_dir" -eq 0 ]]; then
    runner_args+=(--out-dir loadtest/results)
fi
if commit="$(git rev-parse --short=12 HEAD 2>/dev/null)"; then
    [[ -z "$(git status --porcelain 2>/dev/null)" ]] || commit="$commit+changes"
    runner_args+=(--commit "$commit")
fi

status=0
"$TARGET_DIR/chaos" "${runner_args[@]}" "$@" || status=$?
# A full run's report goes into the READMEs' fault tables, passed or not: they show the last run.
if [[ "$own_out_dir" -eq 0 && "$bounded" -eq 0 && -s loadtest/results/chaos-latest.json ]]; then
    python3 -m loadtest.bench.readme chaos || status=1
fi
log "finished in $((SECONDS - started)) s (build included), exit $status"
exit "$status"
