"""What a run measures and where things are: file locations, strategies, the presets of the two
modes, and the load model's defaults as the k6 library defines them.

The k6 defaults (per-user limit, quantity mix, replay and invalid fractions) are read from
`loadtest/k6/lib/seckill.js` rather than copied here, so the recorded settings cannot drift from
what k6 really did. No process is started from this module.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "loadtest" / "results"  # default of --results-dir
RUN_BASE = ROOT / ".run" / "bench"
# scripts/bench.sh builds `release` for measurements and `debug` (shared with `make test`) for smoke;
# CARGO_TARGET_DIR moves cargo's output, so the binaries are looked up there too.
TARGET_DIR = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
PROFILE_DIR = os.environ.get("BENCH_PROFILE", "release")
SECKILL_BIN = TARGET_DIR / PROFILE_DIR / "seckill"
LOCKCTL_BIN = TARGET_DIR / PROFILE_DIR / "lockctl"
K6_SCRIPT = ROOT / "loadtest" / "k6" / "seckill.js"
K6_HEALTHZ = ROOT / "loadtest" / "k6" / "healthz.js"
K6_UNPAID = ROOT / "loadtest" / "k6" / "unpaid.js"
K6_LIB = ROOT / "loadtest" / "k6" / "lib" / "seckill.js"
K6_WRAPPER = ROOT / "scripts" / "k6.sh"
# k6's Go garbage collector in every bench run, unless the environment sets GOGC: off, under a
# soft memory limit (GOMEMLIMIT, `k6_memory_limit`) that a run reaches only if it allocates more
# than that. On the 2 cores it shares with the service, each of k6's collections showed in the
# latency measured. With GOGC=400 (the setting before this one), a 10 s point of owned-shards at
# 1716 arrivals/s had collections 4.7 s and 10.1 s after k6 started, of 285 and 369 ms each, marking
# a live heap of about 140 MB (the VU pool); its requests over 30 ms fell in the same windows of
# the load (4.3-4.7 s and 9.7-10.1 s), and in another run the slow ones spent 11.7 ms on average
# *sending* their request: k6 itself had stalled. In owned-only runs minutes apart, the p99 at 50%
# of the throughput cell was 25.7 to 61.0 ms over 7 points at 400, and 17.1 to 18.2 ms over 6 with
# the collector off (docs/bench.md has the runs). (At the Go default, 100, an earlier run gave
# 60.3, 37.7 and 48.8 ms; with 400, 33.5, 23.4 and 23.2.)
K6_GOGC = "off"
# The most k6 may allocate before it collects at all, and its share of the memory available when a
# run starts.
K6_MEMORY_LIMIT_MAX = 4 << 30
K6_MEMORY_SHARE = 4
WRK_ORDERS = ROOT / "loadtest" / "wrk" / "orders.lua"
WRK_HEALTHZ = ROOT / "loadtest" / "wrk" / "healthz.lua"
# The project's one way to start a seckill instance (loadtest/bench/processes.py calls it).
SERVER_SCRIPT = ROOT / "scripts" / "server.sh"
PEERS_RUN = ROOT / "loadtest" / "peers" / "run.sh"

STRATEGIES = ["none", "redis-lock", "sharded-fenced", "db-atomic", "db-pessimistic", "db-optimistic",
              "owned-shards", "owned-unfenced", "redis-gate", "redis-gate-durable"]
# Smoke leaves out the owned-unfenced control (identical to owned-shards without faults) to stay quick.
SMOKE_STRATEGIES = [s for s in STRATEGIES if s != "owned-unfenced"]
# The strategies the design choice is between: throughput cells and latency points (full mode).
MAIN_CELLS = "owned-shards/20,db-atomic/20,redis-gate/20,redis-gate-durable/20"
# Throughput cells: 10 000 000 user ids, so that the per-user limit does not cap the sale.
THROUGHPUT_USERS = 10_000_000
# Latency points: offered loads as shares of the strategy's throughput cell in the same run.
LATENCY_FRACTIONS = (0.25, 0.5, 0.75)
LATENCY_DURATION_S = 10
# The moderate fixed load of the cost target: owned-shards offered this many arrivals/s by k6, a
# latency point at a fixed rate rather than a share of the throughput cell.
MODERATE_RATE = 2000
# Full mode runs owned-shards' two target points (the moderate rate, and half its throughput cell)
# this many times, in rounds spread among the other points (first, in the middle, last), and each
# target takes its point's median round: the same build cost 196 and 278 µs per order at the
# moderate rate in two runs minutes apart, its HTTP floor 36 and 59 µs per GET /healthz, and the p99
# at half load was 22, 40 and 31 ms in three runs within an hour. One 10 s point measures the box's
# state as much as the service.
TARGET_ROUNDS = 3
# Seconds to wait after a cell's load before reading pg_stat_database: PostgreSQL 15+ backends
# flush their transaction counters when idle, at most once a second.
PG_STATS_SETTLE_S = 1.5
SHARDS = [1, 20]
# The wrk cells (capacity.py): the three designs the choice is between, 20 shards, a stock that
# outlasts 8 s at 35 000 orders/s (1.3 units each on average), far above what this box reaches.
CAPACITY_STRATEGIES = ["owned-shards", "db-atomic", "redis-gate"]
# Full mode runs the capacity cells this many times, in rounds that rotate the strategies' order,
# and the targets and the READMEs take each strategy's median run: one 8 s cell of the same binary
# cost 99 to 140 µs per order from one run to the next within minutes, and owned-shards, first after
# the HTTP floor in every run, always met the box in the same state.
CAPACITY_ROUNDS = 3
# Connections per instance of each capacity round: a strategy's capacity is its best median run over
# these, as a closed loop saturates a strategy at the number of requests in flight that suits it.
# Runs minutes apart on this box (two instances, 8 s each): owned-shards, which answers an order
# once its batch is durable, sold 16 079 and 14 656 orders/s at 64 connections and 17 394, 16 895
# and 14 584 at 128, the box 13 to 16% idle at 64 and 8 to 9% at 128; redis-gate, which answers
# after one Redis script, sold 10 817, 10 299 and 8 827 at 64 and 9 263 and 9 860 at 128, the box
# 3 to 6% idle. Later, at 109a3f0 on an Intel Xeon box (`--only-capacity` with 128 and 256):
# owned-shards sold 21 019, 22 597 and 22 556 orders/s at 128, the box 11 to 13% idle, and 26 319,
# 24 636 and 24 165 at 256, 9% idle; redis-gate 14 957, 14 261 and 13 884 at 128, and 13 502,
# 13 055 and 12 113 at 256. No level above 256: at 6bb5354 (`--only-capacity` with 256 and 512),
# owned-shards sold 22 619, 22 961 and 20 925 orders/s at 256 and 22 234, 20 354 and 19 784 at 512,
# its own CPU per order rising from 24-27 µs to 29-33; with `SECKILL_MAX_IN_FLIGHT=1024`, so that
# the 512 connections are all admitted (256 by default), 21 330, 23 670 and 21 153 against 20 459,
# 21 308 and 21 065. redis-gate sold less at 512 than at 256 both times.
CAPACITY_CONNECTIONS = (64, 128, 256)
CAPACITY_SHARDS = 20
CAPACITY_STOCK = 400_000
# The payment window of the bench's owned sales (the service's longest): with the default 10
# minutes, the reserved orders of the first cells would fall due, and be expired by the service's
# sweeper, while later cells are measured.
BENCH_PAYMENT_WINDOW_MS = 86_400_000
OWNED_STRATEGIES = ("owned-shards", "owned-unfenced")


def payment_window_ms(strategy: str | None) -> int | None:
    """The payment window a bench sale of `strategy` is created with: the bench's for an owned
    strategy, none for the others (they sell final orders)."""
    return BENCH_PAYMENT_WINDOW_MS if strategy in OWNED_STRATEGIES else None

# The hot-users cell's buyers, shared by both instances: with the per-user limit of 2 units they
# are served out within the first few hundred orders, and the rest of the load is refused per user.
HOT_USERS = 200
# Per instance: one wrk process of one thread (two processes, two cores) with this many
# connections each, every one sending its next request as soon as the answer arrives.
WRK_CONNECTIONS = 64
WRK_THREADS = 1
# wrk's own request timeout, above the service's 2 s request deadline: an order the service
# cannot finish in time is seen as its 503 busy answer, not as a client timeout.
WRK_TIMEOUT_S = 5
# The service's request deadline (seckill's default): an order not done by then is answered busy.
REQUEST_DEADLINE_MS = 2000
INSTANCES = 2
# HTTP worker threads per instance (SECKILL_WORKERS, unless the environment sets it): the instances
# share the box, so each gets its share of the cores, one worker per core in all. The service's
# default, one worker per core for each instance, puts twice as many threads as cores in the run
# queue here; measured with --only-capacity on 2 cores, one worker each instead of two took
# owned-shards from 16 296 to 22 896 orders/s and from 83 to 58 µs of server CPU per order.
WORKERS_PER_INSTANCE = max(1, (os.cpu_count() or 1) // INSTANCES)


def instance_workers() -> int:
    """The HTTP workers each instance runs: SECKILL_WORKERS from the environment, else its share."""
    return int(os.environ.get("SECKILL_WORKERS", WORKERS_PER_INSTANCE))

# k6 thresholds that `none` is expected to cross (it oversells): everything else must hold.
NONE_ALLOWED_FAILURES = frozenset({"audit_oversold", "units_accepted"})


@dataclass(frozen=True)
class Preset:
    """The figures of one mode; every one can be overridden on the command line."""

    total: int
    rate: int
    duration_s: int
    max_vus: int
    users: int
    pg_seconds: int
    pg_clients: int
    # redis-benchmark request counts per concurrency (bounded in requests)
    redis_n: dict[int, int] = field(default_factory=dict)
    # the same with -P 16
    redis_n_pipelined: dict[int, int] = field(default_factory=dict)
    lock_ms: int = 3000
    peers: bool = True
    # seconds of wrk load per capacity cell (capacity.py)
    capacity_s: int = 8

    def with_overrides(self, **values: int | bool | None) -> "Preset":
        return replace(self, **{k: v for k, v in values.items() if v is not None})

    @property
    def pre_vus(self) -> int:
        return pre_vus(self.rate, self.max_vus)


def pre_vus(rate: int, max_vus: int) -> int:
    """VUs k6 starts before the load: enough for ~200 ms answers at `rate`, at most `max_vus`."""
    return min(max_vus, max(10, rate // 5))


PRESETS = {
    "full": Preset(total=10000, rate=4000, duration_s=20, max_vus=300, users=10000, pg_seconds=10, pg_clients=20,
                   redis_n={1: 40000, 16: 150000, 50: 200000, 64: 200000},
                   redis_n_pipelined={1: 250000, 16: 1000000, 64: 1000000}, lock_ms=3000, peers=True),
    # 300 units under 1000 arrivals/s, more than the debug build absorbs, with up to 100 buyers in
    # flight: the `none` control oversold by 550-620 units in every trial here (at 200/s, with a
    # few buyers in flight, it oversold by 64 in one run and may not race at all), and every
    # protected strategy faces the same race. 200 in flight raced as well but queued longer after
    # the load (~2 s more per cell).
    "smoke": Preset(total=300, rate=1000, duration_s=3, max_vus=100, users=10000, pg_seconds=2, pg_clients=20,
                    redis_n={1: 4000, 16: 20000, 50: 20000, 64: 20000},
                    redis_n_pipelined={1: 20000, 16: 50000, 64: 50000}, lock_ms=500, peers=False, capacity_s=2),
}

# envStr('NAME', 'default') / envNum('NAME', 0.05, ...) / envBool('NAME', false) in the k6 library.
_K6_ENV_DEFAULT = re.compile(r"env(?:Str|Num|Bool)\(\s*'([A-Z0-9_]+)'\s*,\s*(?:'([^']*)'|([^,)\s]+))")


def k6_defaults(source: str) -> dict[str, str]:
    """NAME -> default (as written) of every environment variable the k6 library reads with a
    literal default. The first occurrence wins."""
    out: dict[str, str] = {}
    for m in _K6_ENV_DEFAULT.finditer(source):
        out.setdefault(m.group(1), m.group(2) if m.group(2) is not None else m.group(3))
    return out


@dataclass(frozen=True)
class LoadModel:
    """What one arrival of the k6 scenario is, from the k6 library's own defaults."""

    per_user_limit: int
    max_per_order: int
    qty_mix: str
    replay_fraction: float
    invalid_fraction: float

    @classmethod
    def from_k6(cls, defaults: dict[str, str]) -> "LoadModel":
        try:
            return cls(per_user_limit=int(defaults["PER_USER_LIMIT"]), max_per_order=int(defaults["MAX_PER_ORDER"]),
                       qty_mix=defaults["QTY_MIX"], replay_fraction=float(defaults["REPLAY_FRACTION"]),
                       invalid_fraction=float(defaults["INVALID_FRACTION"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"the k6 library's defaults changed shape: {e!r}") from e

    @classmethod
    def read(cls, path: Path = K6_LIB) -> "LoadModel":
        return cls.from_k6(k6_defaults(path.read_text()))

    def qty_weights(self) -> list[tuple[int, float]]:
        """QTY_MIX as (quantity, probability) pairs, the weights normalised as k6 does."""
        pairs = [(int(q), float(w)) for q, _, w in (p.strip().partition(":") for p in self.qty_mix.split(",") if p.strip())]
        total = sum(w for _, w in pairs)
        return [(q, w / total) for q, w in pairs]


def k6_memory_limit(meminfo: str | None = None) -> int:
    """Bytes k6's heap may reach before it collects (its GOMEMLIMIT): a quarter of the memory
    available (`MemAvailable` of `/proc/meminfo`, or `meminfo`), at most 4 GiB; 4 GiB when the
    kernel does not say."""
    text = meminfo if meminfo is not None else Path("/proc/meminfo").read_text()
    found = re.search(r"MemAvailable:\s*(\d+) kB", text)
    if not found:
        return K6_MEMORY_LIMIT_MAX
    return min(K6_MEMORY_LIMIT_MAX, int(found.group(1)) * 1024 // K6_MEMORY_SHARE)
