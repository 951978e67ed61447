"""The lock benchmarks: `lockctl bench` on every lockkit backend the environment names, the peer
lock libraries (loadtest/peers) at the same settings, and the ratios to the raw Redis pair rate.

Backends come from URLs: one Redis (`REDIS_URL`), Redis Sentinel, Redlock and Redis Cluster
(`LOCKKIT_SENTINEL_URL`, `LOCKKIT_REDLOCK_URL`, `LOCKKIT_CLUSTER_URL`, from
scripts/lock-servers.sh), ZooKeeper
(`ZOOKEEPER_URL`), etcd (`ETCD_URL`) and PostgreSQL (`DATABASE_URL`, as `postgres://` and as
`postgres+advisory://`). The Redis backends are established: a failure there is a violation. A
backend whose URL is unset, or whose lockctl cannot run it (a backend not built yet, a server not
started), is reported as "not run (why)" and never fails the bench.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass, field
from typing import Mapping

from .cpu import PairCpu
from .processes import SetupError, log, run
from .settings import LOCKCTL_BIN, PEERS_RUN, ROOT
from .stores import Redis, loopback_only, redis_server_pid

LOCK_CONCURRENCIES = [1, 16, 64]
CONTENDED_C = 16
PEER_LIBRARIES = ["rslock", "redis-py", "python-redis-lock", "node-redlock"]
# The peers that run Redlock over several independent masters (the others are single-instance locks).
REDLOCK_PEERS = ["node-redlock", "rslock"]
REDLOCK_URL_ENV = "LOCKKIT_REDLOCK_URL"
CLUSTER_URL_ENV = "LOCKKIT_CLUSTER_URL"
SENTINEL_URL_ENV = "LOCKKIT_SENTINEL_URL"
REDIS_KINDS = ("redis", "sentinel", "redlock", "cluster")


def redis_nodes(url: str) -> tuple[str, list[str]]:
    """(kind, one redis:// URL per server) of a Redis lockkit URL, as lockkit reads it: `redis://`
    one Redis, `redis+cluster://h:p,h:p` a cluster's seed nodes (the first seed's credentials
    apply to the others), `redlock://h:p,h:p,...` independent masters, `redis+sentinel://h:p,.../name`
    the Sentinels (their data nodes come from `sentinel_data_nodes`). Raises SetupError otherwise."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise SetupError("a lock URL needs a scheme (redis://, redis+sentinel://, redis+cluster:// or redlock://)")
    if scheme in ("redis", "rediss"):
        return "redis", [url]
    if scheme in ("redis+sentinel", "rediss+sentinel"):
        return "sentinel", sentinel_parts(url)[0]
    if scheme not in ("redis+cluster", "rediss+cluster", "redlock", "redlocks"):
        raise SetupError(f"unknown lock URL scheme {scheme!r}")
    node_scheme = "rediss" if scheme in ("rediss+cluster", "redlocks") else "redis"
    hosts = [h.strip() for h in rest.split(",")]
    if not hosts or any(not h or h.startswith("@") or h.endswith("@") for h in hosts):
        raise SetupError(f"{scheme}:// URL with an empty host")
    if scheme.endswith("cluster"):
        creds = hosts[0].rpartition("@")[0] if "@" in hosts[0] else None
        return "cluster", [f"{node_scheme}://{creds}@{h}" if creds and "@" not in h else f"{node_scheme}://{h}" for h in hosts]
    return "redlock", [f"{node_scheme}://{h}" for h in hosts]


def sentinel_parts(url: str) -> tuple[list[str], str, str, str]:
    """(one redis:// URL per Sentinel, the master's name, the data nodes' scheme, their userinfo
    with its '@' or '') of a `redis+sentinel://[userinfo@]h:p,h:p/name[/db][?query]` URL, as lockkit
    reads it: the userinfo is the master's; `sentinel_username`/`sentinel_password` are the
    Sentinels'."""
    scheme, _, rest = url.partition("://")
    node_scheme = "rediss" if scheme.startswith("rediss") else "redis"
    rest, _, query = rest.partition("?")
    authority, _, path = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    service = path.split("/")[0]
    if not service:
        raise SetupError(f"{scheme}:// URL without the master's name (…/master-name)")
    params = dict(urllib.parse.parse_qsl(query))
    sentinel_auth = ""
    if "sentinel_username" in params or "sentinel_password" in params:
        sentinel_auth = (urllib.parse.quote(params.get("sentinel_username", ""), safe="") + ":"
                         + urllib.parse.quote(params.get("sentinel_password", ""), safe="") + "@")
    host_list = [h.strip() for h in hosts.split(",")]
    if any(not h or "@" in h for h in host_list):
        raise SetupError(f"{scheme}:// URL with an empty host")
    return [f"{node_scheme}://{sentinel_auth}{h}" for h in host_list], service, node_scheme, userinfo + at


def sentinel_data_nodes(url: str) -> list[str]:
    """The master and replicas that the first answering Sentinel of `url` names, master first, as
    redis:// URLs with the master's credentials. Raises SetupError when no Sentinel answers."""
    sentinels, service, node_scheme, userinfo = sentinel_parts(url)
    errors = []
    for sentinel in sentinels:
        try:
            master = Redis(sentinel).cli("SENTINEL", "get-master-addr-by-name", service, timeout=5).split()
            replicas = Redis(sentinel).cli("SENTINEL", "replicas", service, timeout=5).splitlines()
        except SetupError as e:
            errors.append(str(e))
            continue
        if len(master) != 2:
            errors.append(f"{host_port(sentinel)} does not know {service!r}")
            continue
        nodes = [f"{master[0]}:{master[1]}"] + [f"{r.get('ip')}:{r.get('port')}" for r in replica_fields(replicas)]
        return [f"{node_scheme}://{userinfo}{n}" for n in nodes]
    raise SetupError(f"no Sentinel of {host_port(sentinels[0])}... named a master for {service!r}: {'; '.join(errors)}")


def replica_fields(lines: list[str]) -> list[dict[str, str]]:
    """`SENTINEL replicas` as redis-cli prints it (field and value lines in turn, each replica's
    starting with "name"): one dict per replica."""
    replicas: list[dict[str, str]] = []
    for field_name, value in zip(lines[::2], lines[1::2]):
        if field_name == "name":
            replicas.append({})
        if replicas:
            replicas[-1][field_name] = value
    return replicas


def host_port(url: str) -> str:
    u = urllib.parse.urlparse(url)
    return f"{u.hostname}:{u.port or 6379}"


@dataclass
class LockBackend:
    """One lockkit backend of the comparison."""

    name: str
    label: str
    kind: str  # redis, redlock, cluster, zk, etcd, postgres
    url: str | None
    source: str  # where the URL came from (an environment variable or an option)
    node_urls: list[str] = field(default_factory=list)  # Redis kinds: one redis:// URL per server
    pids: list[int] = field(default_factory=list)  # their redis-server pids (Redis CPU per pair)
    not_run: str | None = None  # why it is not run: never a failure
    error: str | None = None  # a Redis backend that does not answer: a violation

    @property
    def established(self) -> bool:
        return self.kind in REDIS_KINDS

    def check(self) -> None:
        """Redis kinds: every server must answer PING; pids found for the CPU figures. Sentinel:
        the data nodes (master and replicas, whose CPU both count) are asked of the Sentinels."""
        if not self.established or self.not_run:
            return
        if self.kind == "sentinel" and self.url:
            self.node_urls = sentinel_data_nodes(self.url)
        nodes = [Redis(u) for u in self.node_urls]
        for node in nodes:
            try:
                pong = node.cli("PING", timeout=5)
            except SetupError as e:
                raise SetupError(f"{self.label}: {host_port(node.url)} does not answer: {e}") from e
            if pong != "PONG":
                raise SetupError(f"{self.label}: {host_port(node.url)} answered {pong!r} to PING")
        pids = [redis_server_pid(node) for node in nodes]
        if all(pids):
            self.pids = [p for p in pids if p]
        else:
            log(f"{self.label}: redis-server pid not found for every server: no Redis CPU figures")

    def describe(self) -> dict:
        return {"label": self.label, "kind": self.kind, "source": self.source,
                "nodes": [host_port(u) for u in self.node_urls], "redis_pids": self.pids}


def _redis_backend(name_kind: str, url: str, source: str) -> LockBackend:
    kind, nodes = redis_nodes(url)
    if kind != name_kind:
        raise SetupError(f"{source} must be a {name_kind} URL (got a {kind} one)")
    for node in nodes:
        loopback_only(node, source)
    if kind == "sentinel":
        # The data nodes are known once the Sentinels are asked (check()).
        return LockBackend("sentinel", f"Sentinel ({len(nodes)} sentinels)", kind, url, source)
    name = "redis" if kind == "redis" else f"{kind}-{len(nodes)}"
    label = {"redis": "one Redis", "redlock": f"Redlock {len(nodes)} nodes", "cluster": f"Cluster {len(nodes)} masters"}[kind]
    return LockBackend(name, label, kind, url, source, node_urls=nodes)


def _other_backend(name: str, label: str, kind: str, url: str | None, source: str) -> LockBackend:
    be = LockBackend(name, label, kind, url, source)
    if not url:
        be.not_run = f"{source} unset"
        return be
    try:
        loopback_only(url, source)
    except SetupError as e:
        be.not_run = str(e)
    return be


def advisory_url(database_url: str) -> str | None:
    """`postgres+advisory://` with the rest of a `postgres://` (or `postgresql://`) URL."""
    scheme, sep, rest = database_url.partition("://")
    return f"postgres+advisory://{rest}" if sep and scheme in ("postgres", "postgresql") else None


def start_servers(with_services: str) -> None:
    """Starts lockkit's extra servers: the Redlock nodes, the Cluster and the Sentinel set
    (scripts/lock-servers.sh), and the services in `with_services` (scripts/services.sh, e.g.
    zookeeper,etcd). scripts/bench.sh has them started here, in the lock section after the head to
    head (`quiet_head_to_head`), rather than with the seckill cells, beside which they would only
    idle on the same cores; it stops them at the end."""
    log("starting lockkit's servers: scripts/lock-servers.sh up")
    run(["bash", str(ROOT / "scripts" / "lock-servers.sh"), "up"], timeout=300, check=True)
    if with_services:
        log(f"starting lockkit's servers: WITH={with_services} scripts/services.sh up")
        run(["bash", str(ROOT / "scripts" / "services.sh"), "up"], timeout=600, check=True,
            env={**os.environ, "WITH": with_services})


def plan_backends(env: Mapping[str, str], redis_url: str, redlock_url: str, cluster_url: str,
                  sentinel_url: str = "") -> list[LockBackend]:
    """Every backend of the lock section, in table order; the first is the one Redis. Raises
    SetupError for a malformed or non-loopback Redis URL (the established backends)."""
    backends = [_redis_backend("redis", redis_url, "REDIS_URL")]
    labels = {"sentinel": "Sentinel", "redlock": "Redlock", "cluster": "Cluster"}
    for kind, url, source in (("sentinel", sentinel_url, SENTINEL_URL_ENV), ("redlock", redlock_url, REDLOCK_URL_ENV),
                              ("cluster", cluster_url, CLUSTER_URL_ENV)):
        if url:
            backends.append(_redis_backend(kind, url, source))
        else:
            backends.append(LockBackend(kind, labels[kind], kind, None, source, not_run=f"{source} unset"))
    database_url = env.get("DATABASE_URL") or None
    backends += [
        _other_backend("zk", "ZooKeeper", "zk", env.get("ZOOKEEPER_URL") or None, "ZOOKEEPER_URL"),
        _other_backend("etcd", "etcd", "etcd", env.get("ETCD_URL") or None, "ETCD_URL"),
        _other_backend("postgres", "PostgreSQL (lease table)", "postgres", database_url, "DATABASE_URL"),
        _other_backend("postgres-advisory", "PostgreSQL advisory locks", "postgres",
                       advisory_url(database_url) if database_url else None, "DATABASE_URL"),
    ]
    return backends


def lockctl_line(stdout: str, returncode: int, stderr: str) -> dict:
    """lockctl's last JSON line, or {"error": ...} when it did not measure (its own error event
    included: `{"event": "error", "error": "..."}`)."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        out = json.loads(line)
    except ValueError:
        out = None
    if isinstance(out, dict) and returncode == 0 and "pairs_per_sec" in out:
        return out
    if isinstance(out, dict) and out.get("event") == "error":
        return {"error": str(out.get("error")), "retryable": out.get("retryable")}
    return {"error": f"exit {returncode}: {(line + ' ' + stderr[-300:]).strip()}"}


def lockctl_bench(url: str, concurrency: int, duration_ms: int, locks: int | None, pids: list[int] | None = None) -> dict:
    cmd = [str(LOCKCTL_BIN), "--url", url, "bench", "--concurrency", str(concurrency), "--duration-ms", str(duration_ms)]
    if locks is not None:
        cmd += ["--locks", str(locks)]
    with PairCpu(pids) as cpu:
        proc = run(cmd, timeout=duration_ms / 1000 + 60)
    out = {"concurrency": concurrency, "locks": locks or concurrency, **lockctl_line(proc.stdout, proc.returncode, proc.stderr)}
    out["mode"] = "contended" if locks == 1 else "uncontended"
    if "error" not in out:
        out.update(cpu.fields(out.get("pairs")))
    return out


def peer_run(library: str, mode: str, concurrency: int, urls: list[str], duration_ms: int,
             pids: list[int] | None = None) -> tuple[dict, int]:
    """One run of loadtest/peers/run.sh (one library, one mode, one concurrency), so that the
    Redis CPU time around it is this run's alone. Returns (JSON line, run.sh exit status)."""
    env = dict(os.environ)
    env.update({"DURATION_MS": str(duration_ms), "LIBRARIES": library, "MODES": mode,
                "CONCURRENCIES": str(concurrency), "CONTENDED_C": str(concurrency),
                "REDIS_URL": urls[0], "REDIS_URLS": ",".join(urls)})
    with PairCpu(pids) as cpu:
        proc = run(["bash", str(PEERS_RUN)], timeout=duration_ms / 1000 + 45, env=env)
    row = None
    for line in proc.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            pass
    if row is None:
        row = {"library": library, "mode": mode, "concurrency": concurrency,
               "error": f"run.sh exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    row.setdefault("concurrency", concurrency)
    if "error" not in row:
        row.update(cpu.fields(row.get("pairs")))
    return row, proc.returncode


def _describe_run(r: dict) -> str:
    if "error" in r:
        return f"error {r['error']}"
    return (f"{float(r.get('pairs_per_sec') or 0):.0f} pairs/s, p99 {r.get('p99_us')} us, "
            f"Redis CPU {r.get('redis_cpu_us_per_pair')} us/pair, client CPU {r.get('client_cpu_us_per_pair')} us/pair")


def peers_bench(backend: LockBackend, libraries: list[str], duration_ms: int) -> tuple[list[dict], int]:
    rows, rc = [], 0
    for lib in libraries:  # per library: uncontended, then contended
        for mode, c in [("uncontended", c) for c in LOCK_CONCURRENCIES] + [("contended", CONTENDED_C)]:
            row, code = peer_run(lib, mode, c, backend.node_urls, duration_ms, backend.pids)
            row["backend"] = backend.name
            rows.append(row)
            rc = rc or code
            log(f"    {lib} {mode} C={c}: {_describe_run(row)}")
    return rows, rc


def backend_runs(be: LockBackend, duration_ms: int) -> list[dict]:
    """lockctl bench at C = 1, 16, 64 uncontended and C = 16 contended. A new backend whose first
    run fails (lockctl's config error, a server that is not there) is marked not run instead."""
    runs = []
    for c, locks in [(c, None) for c in LOCK_CONCURRENCIES] + [(CONTENDED_C, 1)]:
        r = lockctl_bench(be.url or "", c, duration_ms, locks, be.pids)
        if not runs and "error" in r and not be.established:
            be.not_run = f"lockctl: {r['error']}"
            log(f"lockctl on {be.label}: not run ({r['error']})")
            return []
        r["backend"] = be.name
        runs.append(r)
        what = f"uncontended C={c}" if locks is None else f"contended C={c} --locks 1"
        log(f"lockctl bench on {be.label}, {what} ({duration_ms} ms): {_describe_run(r)}")
    return runs


# lockkit against rslock, the cheapest peer (a plain SET NX lock without a fence), at the targets'
# concurrencies: runs of the two alternate, so that both see the box in the same state. One run of
# each, minutes apart, put lockkit's C=16 ratio at x0.61, x0.93 and x0.73 in three full runs.
# Rounds go lockkit-rslock, then rslock-lockkit, and so on (`round_order`), in an even number: the
# box drifts over the section (in two runs of three rounds that always ran lockkit first, both
# libraries' pairs/s rose round after round, so lockkit always met the slower box).
HEAD_TO_HEAD_PEER = "rslock"
HEAD_TO_HEAD_CONCURRENCIES = (16, 64)
HEAD_TO_HEAD_ROUNDS = 4
# What the medians are taken of.
HEAD_TO_HEAD_FIELDS = ("pairs_per_sec", "redis_cpu_us_per_pair", "client_cpu_us_per_pair", "p99_us")


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def medians(runs: list[dict]) -> dict:
    """The median of each of `HEAD_TO_HEAD_FIELDS` over the runs that completed, and how many did."""
    done = [r for r in runs if "error" not in r]
    out: dict = {"runs": len(done)}
    for key in HEAD_TO_HEAD_FIELDS:
        out[key] = _median([float(r[key]) for r in done if r.get(key) is not None])
    return out


def round_order(n: int) -> tuple[str, str]:
    """Which side runs first in round `n` (from 1): lockkit in odd rounds, the peer in even ones, so
    that over an even number of rounds a box that drifts one way favours neither."""
    return ("lockkit", HEAD_TO_HEAD_PEER) if n % 2 else (HEAD_TO_HEAD_PEER, "lockkit")


def head_to_head(be: LockBackend, duration_ms: int) -> dict:
    """`HEAD_TO_HEAD_ROUNDS` rounds of lockctl bench and rslock on the one Redis, in
    `round_order`, per concurrency (uncontended), and the medians of each side."""
    out = {}
    for c in HEAD_TO_HEAD_CONCURRENCIES:
        sides: dict[str, list[dict]] = {"lockkit": [], HEAD_TO_HEAD_PEER: []}
        for n in range(1, HEAD_TO_HEAD_ROUNDS + 1):
            for side in round_order(n):
                if side == "lockkit":
                    sides[side].append(lockctl_bench(be.url or "", c, duration_ms, None, be.pids))
                else:
                    sides[side].append(peer_run(side, "uncontended", c, be.node_urls, duration_ms, be.pids)[0])
            log(f"    head to head C={c}, round {n}: lockkit {_describe_run(sides['lockkit'][-1])}; "
                f"{HEAD_TO_HEAD_PEER} {_describe_run(sides[HEAD_TO_HEAD_PEER][-1])}")
        out[str(c)] = {name: {"runs": runs, "median": medians(runs)} for name, runs in sides.items()}
    return out


def lock_ratios(lock_runs: list[dict], peers: list[dict], redis_by_c: dict, piped_by_c: dict) -> dict:
    """lockkit's uncontended pairs/s over the raw Redis pair rate and over each peer's, per C."""
    ratios = {}
    for r in lock_runs:
        if r.get("mode") != "uncontended" or "pairs_per_sec" not in r:
            continue
        c = r["concurrency"]
        raw = redis_by_c.get(c, {}).get("pairs_per_sec")
        piped = piped_by_c.get(c, {}).get("pairs_per_sec")
        entry = {"lockkit_pairs_per_sec": r["pairs_per_sec"], "redis_pairs_per_sec": raw,
                 "vs_redis": round(r["pairs_per_sec"] / raw, 3) if raw else None,
                 "redis_pipelined_pairs_per_sec": piped,
                 "vs_redis_pipelined": round(r["pairs_per_sec"] / piped, 3) if piped else None, "vs_peers": {}}
        for p in peers:
            if p.get("mode") == "uncontended" and p.get("concurrency") == c and p.get("pairs_per_sec"):
                entry["vs_peers"][p["library"]] = round(r["pairs_per_sec"] / float(p["pairs_per_sec"]), 3)
        ratios[str(c)] = entry
    return ratios


def empty_section(duration_ms: int) -> dict:
    return {"lockctl": [], "peers": [], "backends": {}, "redis_pairs": {}, "redis_pairs_pipelined": {},
            "ratios": {}, "duration_ms": duration_ms}


def quiet_head_to_head(duration_ms: int, peers_on: bool, one_redis: LockBackend) -> dict:
    """The head to head with the peer on the one Redis, if the peers run and that backend works.
    The runner calls it before the other backends' servers start: idle beside the runs, they cost
    lockkit more than the peer (see docs/bench.md)."""
    if not peers_on or HEAD_TO_HEAD_PEER not in PEER_LIBRARIES or one_redis.error or one_redis.not_run:
        return {}
    log(f"lockkit and {HEAD_TO_HEAD_PEER} head to head on {one_redis.label}, before the other lock servers start: "
        f"{HEAD_TO_HEAD_ROUNDS} alternating rounds at C={', '.join(map(str, HEAD_TO_HEAD_CONCURRENCIES))}")
    return head_to_head(one_redis, duration_ms)


def lockkit_section(duration_ms: int, peers_on: bool, redis_by_c: dict, backends: list[LockBackend],
                    piped_by_c: dict, pipeline: int, versus: dict) -> dict:
    """lockctl bench on every backend (the first is the one Redis), then the peers: all of them on
    the one Redis, the Redlock peers on the Redlock backend. `versus` is the head to head, run
    before (`quiet_head_to_head`)."""
    out_backends: dict[str, dict] = {}
    for be in backends:
        entry = out_backends[be.name] = {**be.describe(), "runs": [], "peers": [], "peers_exit": None}
        if be.not_run or be.error:
            if be.error:
                log(f"lockctl on {be.label}: not run ({be.error})")
            entry.update({"not_run": be.not_run, "error": be.error})
            continue
        entry["runs"] = backend_runs(be, duration_ms)
        entry["not_run"] = be.not_run
    if peers_on:
        for be in backends:
            libs = PEER_LIBRARIES if be.kind == "redis" else REDLOCK_PEERS if be.kind == "redlock" else []
            if be.error or be.not_run or not libs:
                continue
            log(f"peer harnesses on {be.label} (loadtest/peers/run.sh, {duration_ms} ms per run)")
            rows, rc = peers_bench(be, libs, duration_ms)
            out_backends[be.name].update({"peers": rows, "peers_exit": rc})
    first = out_backends[backends[0].name]
    return {
        "head_to_head": versus,
        "head_to_head_peer": HEAD_TO_HEAD_PEER,
        "duration_ms": duration_ms,
        "lockctl": first["runs"],
        "peers": first["peers"],
        "peers_exit": first["peers_exit"],
        "backends": out_backends,
        "redis_pairs": {str(c): v for c, v in redis_by_c.items()},
        "redis_pairs_pipelined": {str(c): v for c, v in piped_by_c.items()},
        "pipeline": pipeline,
        "ratios": lock_ratios(first["runs"], first["peers"], redis_by_c, piped_by_c),
        "contended_c": CONTENDED_C,
        "note": "uncontended: each worker its own lock (locks = concurrency); contended: --locks 1. "
                "Ratios compare pairs/s at the same concurrency; vs_redis (the target) against redis-benchmark "
                f"without pipelining, vs_redis_pipelined (informational) against redis-benchmark -P {pipeline}.",
        "cpu_note": "redis_cpu_us_per_pair: utime+stime of the backend's redis-server processes (/proc/PID/stat, "
                    "summed over the nodes) after the run minus before it, over the run's pairs; the window includes "
                    "the client's start-up and warm-up (a few commands) and the servers' idle housekeeping. "
                    "client_cpu_us_per_pair: utime+stime of the benchmark process (lockctl bench, or a peer's harness "
                    "through loadtest/peers/run.sh), a waited-for child, over the run's pairs: the library under test, "
                    "its Redis client and the harness loop, start-up included.",
    }


def lock_violations(section: dict) -> list[str]:
    """Failures of the established (Redis) backends; the new ones only ever show "not run" or
    "error" in the table."""
    out = []
    for name, be in section.get("backends", {}).items():
        if be.get("kind") not in REDIS_KINDS or be.get("not_run"):
            continue
        if be.get("error"):
            out.append(f"lockctl bench on {be['label']} not run: {be['error']}")
        for r in be.get("runs", []):
            if "error" in r:
                where = "" if name == "redis" else f" on {be['label']}"
                out.append(f"lockctl bench{where} C={r['concurrency']} {r['mode']} failed: {r['error']}")
    return out
