#!/usr/bin/env bash
# Runs every peer lock-library harness under the `lockctl bench` contract and prints one JSON
# line per run, with "library" and "mode" added. Run setup.sh first.
#
#   CONCURRENCIES   uncontended concurrencies (each worker its own lock)   default "1 16 64"
#   CONTENDED_C     concurrency of the contended run (--locks 1)           default 16
#   DURATION_MS     length of each run                                     default 3000
#   MODES           which runs          default "uncontended contended"
#   LIBRARIES       subset to run       default "rslock redis-py python-redis-lock node-redlock"
#                                       (with several REDIS_URLS: "rslock node-redlock")
#   REDIS_URL       loopback Redis      default redis://127.0.0.1:6390
#   REDIS_URLS      comma-separated independent masters for the Redlock libraries (rslock,
#                   node-redlock: quorum n/2+1); default REDIS_URL. With more than one URL the
#                   single-instance libraries (redis-py, python-redis-lock) are refused.
#
# A run that fails prints {"library":..,"mode":..,"error":..} instead; the script then exits 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="$root/.run/peers-venv/bin/python"
rslock_bin="$here/rslock/target/release/rslock-bench"

duration_ms="${DURATION_MS:-3000}"
contended_c="${CONTENDED_C:-16}"
redis_url="${REDIS_URL:-redis://127.0.0.1:6390}"
url_list=()
IFS=, read -r -a raw_urls <<<"${REDIS_URLS:-$redis_url}"
for u in "${raw_urls[@]}"; do
  u="${u// /}"
  [[ -z "$u" ]] || url_list+=("$u")
done
redis_urls="$(IFS=,; printf '%s' "${url_list[*]}")" # what the harnesses get: URL[,URL...]
read -r -a concurrencies <<<"${CONCURRENCIES:-1 16 64}"
read -r -a modes <<<"${MODES:-uncontended contended}"
if [[ "${#url_list[@]}" -gt 1 ]]; then
  read -r -a libraries <<<"${LIBRARIES:-rslock node-redlock}"
else
  read -r -a libraries <<<"${LIBRARIES:-rslock redis-py python-redis-lock node-redlock}"
fi

if [[ ! "$duration_ms" =~ ^[0-9]+$ ]]; then
  echo "run.sh: DURATION_MS must be a number of milliseconds" >&2
  exit 2
fi
if [[ "${#url_list[@]}" -eq 0 ]]; then
  echo "run.sh: REDIS_URLS is empty" >&2
  exit 2
fi
for library in "${libraries[@]}"; do
  case "$library" in
    redis-py | python-redis-lock)
      if [[ "${#url_list[@]}" -gt 1 ]]; then
        echo "run.sh: $library is a single-instance lock; REDIS_URLS lists ${#url_list[@]} servers" >&2
        exit 2
      fi
      ;;
  esac
done
for mode in "${modes[@]}"; do
  if [[ "$mode" != uncontended && "$mode" != contended ]]; then
    echo "run.sh: MODES may hold only uncontended and contended" >&2
    exit 2
  fi
done
if [[ ! -x "$python" || ! -x "$rslock_bin" || ! -d "$here/node-redlock/node_modules" ]]; then
  echo "run.sh: harnesses not installed; run $here/setup.sh first" >&2
  exit 2
fi
# Hard bound per run: the duration plus start-up and the harnesses' own give-up margins.
limit_s=$((duration_ms / 1000 + 30))
failed=0

run_one() {
  local library="$1" mode="$2"
  shift 2
  local -a cmd
  case "$library" in
    rslock) cmd=("$rslock_bin") ;;
    redis-py) cmd=("$python" "$here/redis_py_lock.py") ;;
    python-redis-lock) cmd=("$python" "$here/python_redis_lock.py") ;;
    node-redlock) cmd=(node "$here/node-redlock/bench.mjs") ;;
    *)
      echo "run.sh: unknown library $library" >&2
      exit 2
      ;;
  esac
  local out status=0
  out="$(timeout --kill-after=5 "$limit_s" "${cmd[@]}" \
    --redis-url "$redis_urls" --duration-ms "$duration_ms" "$@")" || status=$?
  out="${out##*$'\n'}" # the report is the last line
  if [[ $status -eq 0 && "$out" == "{"*"}" ]]; then
    printf '{"library":"%s","mode":"%s",%s\n' "$library" "$mode" "${out#\{}"
  else
    printf '{"library":"%s","mode":"%s","args":"%s","error":"exit status %d"}\n' \
      "$library" "$mode" "$*" "$status"
    failed=1
  fi
}

for library in "${libraries[@]}"; do
  for mode in "${modes[@]}"; do
    if [[ "$mode" == uncontended ]]; then
      for c in "${concurrencies[@]}"; do
        run_one "$library" uncontended --concurrency "$c"
      done
    else
      run_one "$library" contended --concurrency "$contended_c" --locks 1
    fi
  done
done
exit "$failed"
