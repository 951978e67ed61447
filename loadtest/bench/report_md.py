"""latest.md: the tables docs/bench.md describes, filled in from one `RunResult`. Pure: text in,
text out; one function per section."""

from __future__ import annotations

from . import disk
from .capacity import WrkResult, box_cpu_pct
from .cells import CellResult
from .latency import medians, point_flag, server_us_per_order
from .locks import CONTENDED_C, LOCK_CONCURRENCIES, PEER_LIBRARIES, REDLOCK_PEERS
from .result import RunResult
from .settings import MODERATE_RATE

LATENCY_SVG = "latest-latency.svg"


def fmt(v, nd: int = 0) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int) or nd == 0:
        return f"{float(v):,.0f}".replace(",", " ") if abs(float(v)) >= 10000 else f"{float(v):.0f}"
    return f"{float(v):.{nd}f}"


def table(header: list[str], align: str, rows: list[list[str]]) -> list[str]:
    """A markdown table; `align` has one letter per column: l(eft) or r(ight)."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""]


def provenance(res: RunResult) -> str:
    g = res.git
    if g.get("dirty"):
        state = " (dirty tree: uncommitted changes to tracked files)"
    elif g.get("untracked"):
        state = f" (untracked files: {', '.join(g['untracked'][:3])})"
    else:
        state = ""
    return f"Commit `{g.get('short')}`{state}"


def header(res: RunResult) -> list[str]:
    m, s = res.machine, res.settings
    L = [f"# seckill comparison: {res.started_at}", "",
         f"{provenance(res)}, mode **{res.mode}**{' (--only-capacity)' if s.get('only_capacity') else ''}, "
         f"{res.duration_s:.0f} s wall. Machine: {m.get('nproc')} CPU "
         f"({m.get('cpu_model')}), kernel {m.get('kernel')}, Redis {m.get('redis_server')}, PostgreSQL "
         f"{m.get('postgres_server')}, {m.get('k6')}. Load average at start "
         f"{', '.join(f'{x:.2f}' for x in m.get('loadavg_start', []))}.", ""]
    if s.get("only_capacity"):
        return L
    L += [f"Each mission cell: a fresh sale of {s['total']} units (per-user limit {s['per_user_limit']}, quantity mix "
         f"{s['qty_mix']}, {s['replay_fraction'] * 100:.0f}% replays, {s['invalid_fraction'] * 100:.0f}% invalid requests: "
         f"the k6 library's defaults), k6 open model at {s['rate']} arrivals/s for {s['duration_s']} s over two instances "
         f"(max {s['max_vus']} VUs). orders/s = orders committed / (time from the start of the load until the last order "
         "if the sale sold out, else the load duration). Latency in this table: accepted (201) orders only, as k6 saw "
         "them, at saturation (queueing; see the latency table for offered loads below saturation)."]
    if s.get("throughput_cells"):
        L += ["", f"Throughput cells ({', '.join(s['throughput_cells'])}): the same load, but a sale of "
                  f"{s['throughput_total']} units and {s['throughput_users']} user ids, so the stock outlasts the load "
                  "(at most 2 units per arrival) and orders/s is the steady-state rate over the whole load."]
    L += ["", "Per-order costs: Redis `INFO stats` total_commands_processed and PostgreSQL `sum(xact_commit)` from "
              "`pg_stat_database` (read-only transactions included), server-wide deltas over the whole cell (k6 setup "
              "with the sale PUT, the load, the teardown audit; the runner's own probes add about 1 Redis command and "
              "3 commits), divided by the orders committed.", "",
          "`acked missing`: orders k6 was answered 201 for (by Idempotency-Key, from k6's console log) that the "
          "orders table does not have. The audit cannot see those; it must be 0 for every strategy.", "",
          "![orders/s and oversold per strategy](latest.svg)", ""]
    return L


def wrk_cost(c: WrkResult) -> str:
    """Server CPU µs per order as `seckill + postgres + redis = total` (per request for the cells
    whose orders stop early or do not exist: hot users, the HTTP floor)."""
    cost = c.cpu_us_per_request if c.kind in ("hot-users", "healthz") else c.cpu_us_per_order
    if not cost:
        return "-"
    return f"{fmt(cost['seckill'])} + {fmt(cost['postgres'])} + {fmt(cost['redis'])} = {fmt(cost['total'])}"


def capacity_rows(res: RunResult) -> list[str]:
    """The wrk cells: capacity, retry storm, hot users and the HTTP floor."""
    if not res.capacity:
        return []
    cap = res.settings.get("capacity") or {}
    L = ["## Capacity, retry storm and hot users (wrk)", "",
         f"wrk, one process per instance ({cap.get('connections_per_instance')} connections each, the capacity cells "
         f"{' and '.join(map(str, cap.get('capacity_connections_per_instance') or []))} (**conns**), every one sending its "
         f"next request as soon as the answer arrives: a closed loop at saturation), {cap.get('duration_s')} s per cell, "
         f"a fresh sale of {fmt(cap.get('total'))} units over 20 shards (it outlasts the load). **capacity**: a fresh "
         f"Idempotency-Key per request, users from {fmt(cap.get('users'))} ids, the k6 library's quantity mix. "
         "**storm**: the same, but both instances receive the identical sequence (same keys, users, quantities) at "
         "once: each key may make one order, the other instance must answer its replay. **hot users**: fresh keys, "
         f"all orders from {cap.get('hot_users')} users, so after a few hundred orders every answer is a per-user "
         "refusal (409, expected). **healthz floor**: `GET /healthz`. orders/s = orders in PostgreSQL when the load "
         "ended / wrk's load time: what is durable per second of load (redis-gate acknowledges before its writer "
         "commits; `drain s` is how long its writer took to catch up after the load, and `orders` counts them all, "
         "after the drain); decided/s = answers 201, 200 or 409 per second. p50/p99: "
         "wrk's, the worse of the two instances. Server CPU: utime + stime of every seckill and postgres "
         "process and of the service's redis-server (`/proc`) from the start of the load to the end of the drain, per order (per request "
         "for hot users and the floor); wrk µs/request: wrk's own CPU (a waited-for child); box CPU %: the whole "
         f"machine's over the same window, in % of one core ({res.machine.get('nproc')} cores = {(res.machine.get('nproc') or 0) * 100}%). "
         "**round**: the capacity cells run in rounds that rotate the strategies' order, each strategy at each number "
         "of connections; a strategy's capacity, which the targets and the READMEs take, is its median run by orders/s "
         "(*median*) at the number of connections where that median is highest (*median, capacity*).", ""]
    rows = []
    for c in res.capacity:
        per = "request" if c.kind in ("hot-users", "healthz") else "order"
        rows.append([c.kind, c.strategy or "-", str(c.spec.connections), round_cell(c), fmt(c.orders_per_sec) if c.strategy else "-", fmt(c.decided_per_sec),
                     fmt(c.orders) if c.strategy else "-", fmt(c.drain_s, 1) if c.drain_s is not None else "-",
                     fmt(c.requests), fmt(c.requests - c.ok_2xx), fmt(c.busy_503),
                     fmt(c.server_5xx), fmt(c.socket_errors), fmt(c.p50_ms, 1), fmt(c.p99_ms, 1), wrk_cost(c), per,
                     fmt(c.wrk_us_per_request, 1), fmt(box_cpu_pct(c)),
                     "ok" if not c.violations else "**VIOLATION**"])
    L += table(["cell", "strategy", "conns", "round", "orders/s", "decided/s", "orders", "drain s", "requests", "non-2xx", "503",
                "other 5xx", "no answer", "p50 ms", "p99 ms", "server CPU µs (seckill + postgres + redis = total)", "per",
                "wrk µs/request", "box CPU %", "check"], "llrlrrrrrrrrrrrrlrrl", rows)
    kinds = [f"- {c.name}: " + ", ".join(f"{k} {fmt(n)}" for k, n in c.answers.items() if not k.isdigit())
             for c in res.capacity if any(not k.isdigit() for k in c.answers)]
    if kinds:
        L += ["Answers >= 400 by error code:", ""] + kinds + [""]
    return L


def round_cell(c: WrkResult) -> str:
    """Which run of its cell `c` is: '-' for a cell run once, else its round, whether it is the
    median run at its connections, and whether that median is the strategy's capacity, the run the
    targets read."""
    if not c.spec.round_no:
        return "-"
    mark = " *median, capacity*" if c.represents else " *median*" if c.median else ""
    return f"{c.spec.round_no}{mark}"


def strategy_rows(res: RunResult) -> list[str]:
    s = res.settings
    L = ["## Strategies", ""]
    if not res.strategies:
        L += ["Not run in this run" + (" (--only-locks)." if s.get("only_locks") else "."), ""]
    rows = []
    for c in res.strategies:
        so = fmt(c.window_s, 1) if c.sold_out_reached else f"not ({c.spec.duration_s} s)"
        rows.append([c.strategy, str(c.shards), c.kind, fmt(c.orders_per_sec), fmt(c.p50_ms, 1), fmt(c.p99_ms, 1),
                     fmt(c.sold), fmt(c.oversold), fmt(c.stranded), fmt(c.acked_missing), fmt(c.fence_rejections),
                     fmt(c.busy), fmt(c.errors), so, fmt(c.redis_cmds_per_order, 3), fmt(c.pg_commits_per_order, 3),
                     f"{c.k6_verdict} ({c.k6_exit})", "ok" if not c.violations else "**VIOLATION**"])
    return L + table(["strategy", "shards", "cell", "orders/s", "p50 ms", "p99 ms", "sold", "oversold", "stranded",
                      "acked missing", "fence rej.", "busy (503)", "errors", "sold out after s", "Redis cmds / order",
                      "PG commits / order", "k6", "check"], "lrlrrrrrrrrrrrrrll", rows)


def cpu_rows(cells: list[CellResult]) -> list[str]:
    profiled = [c for c in cells if c.cpu_profile and (c.kind == "throughput" or c.shards == 20) and c.kind != "latency"]
    if not profiled:
        return []
    cores = profiled[0].cpu_profile.get("cores", 0)
    L = [f"Where the CPU went during each 20-shard and throughput cell (% of one core, over k6's run; the box has "
         f"{cores} cores = {cores * 100}%): the service, PostgreSQL, the load generator and Redis share them.", ""]
    rows = [[c.strategy, c.kind] + [fmt(c.cpu_profile.get(k)) for k in ("seckill", "postgres", "k6", "redis", "other", "busy")]
            for c in profiled]
    return L + table(["strategy", "cell", "seckill (2 instances)", "postgres", "k6", "redis", "other", "busy"], "llrrrrrr", rows)


def lock_internal_rows(cells: list[CellResult]) -> list[str]:
    lock_rows = [c for c in cells if c.service_metrics.get("lock_acquired")]
    if not lock_rows:
        return []
    rows = []
    for c in lock_rows:
        m = c.service_metrics
        per = m["lock_attempts_held"] / m["lock_acquired"] if m["lock_acquired"] else None
        rows.append([c.strategy, f"{c.shards}{' (throughput)' if c.kind == 'throughput' else ''}", fmt(m["lock_acquired"]),
                     fmt(per, 1), fmt(m["lock_wait_ms_avg"], 1), fmt(m["lock_hold_ms_avg"], 1),
                     fmt(m["lock_wait_timeouts"]), fmt(m["order_ms_avg_accepted"], 1)])
    return (["Inside the lock-based strategies (the services' own metrics, both instances, during the cell):", ""]
            + table(["strategy", "shards", "lock acquisitions", "refused attempts per acquisition", "mean wait for a lock ms",
                     "mean hold ms", "probes given up", "mean accepted order ms (server)"], "lrrrrrrr", rows))


def latency_rows(res: RunResult) -> list[str]:
    s = res.settings
    if not res.latency:
        if s.get("latency_cells"):
            return ["## Latency at fixed offered loads", "", "Not measured: no throughput cell of those strategies ran.", ""]
        return []
    L = ["## Latency at fixed offered loads", "",
         f"Offered loads below saturation: {', '.join(f'{f * 100:.0f}%' for f in s.get('latency_fractions', []))} of the "
         f"strategy's throughput cell (orders/s) in this run, offered as arrivals/s for {s.get('latency_duration_s')} s on "
         "a sale whose stock outlasts the load, with a VU pool of one second of arrivals (a quarter of it started up "
         "front) so that k6 sends every arrival (an open model). A point where k6 still dropped arrivals (`dropped_iterations`) fell back to a closed loop: "
         "its percentiles ignore the requests never sent, so it is flagged NOT VALID and left out of the chart. "
         f"owned-shards has one more point at a fixed {MODERATE_RATE} arrivals/s (the moderate load of its cost target)"
         + (f". Its two target points, that one and 50%, run in {s['target_rounds']} rounds spread among the others, each "
            "on its own sale: the cost target takes the moderate point's median round by server CPU per order, the p99 "
            "target the 50% point's median round by p99. " if s.get("target_rounds", 1) > 1 else ". ") +
         "Each point follows a VACUUM ANALYZE and a CHECKPOINT and starts once the servers are quiet (under 10% of a core), so no "
         "earlier cell's or point's leftover work (autovacuum of the rows it wrote) counts. "
         "Server CPU per order: seckill + PostgreSQL + Redis over k6's whole run (the sale's setup and the teardown "
         "audit included), per order made.", "",
         f"![p99 against offered load per strategy]({LATENCY_SVG})", ""]
    rows = []
    taken = medians(res.latency)
    for c in res.latency:
        flag = point_flag(c)
        run = f", round {c.spec.round_no}" + (" (median)" if c in taken else "") if c.spec.round_no else ""
        rows.append([c.strategy, str(c.shards), f"{(c.spec.fraction or 0) * 100:.0f}%{run}", fmt(c.spec.rate), fmt(c.orders_per_sec),
                     fmt(c.p50_ms, 1), fmt(c.p90_ms, 1), fmt(c.p99_ms, 1), fmt(c.dropped_iterations), fmt(c.max_vus),
                     fmt(c.busy), fmt(c.errors), fmt((server_us_per_order(c) or {}).get("total")),
                     "ok" if not flag and not c.violations else f"**NOT VALID**: {flag}" if flag else "**VIOLATION**"])
    return L + table(["strategy", "shards", "offered", "arrivals/s", "orders/s", "p50 ms", "p90 ms", "p99 ms", "dropped",
                      "VUs used", "busy (503)", "errors", "server CPU µs/order", "point"], "lrrrrrrrrrrrrl", rows)


def ceiling_rows(res: RunResult) -> list[str]:
    rows = []
    hc, pgc = res.ceilings.get("http") or {}, res.ceilings.get("pg") or {}
    if hc.get("error"):
        rows.append(["HTTP ceiling", "-", f"not measured: {hc['error'][:200]}"])
    elif hc:
        capped = " (no arrival dropped: capped by the offered rate, the real ceiling is higher)" if hc.get("capped_by_offered_rate") else ""
        rows.append(["HTTP ceiling", f"{fmt(hc.get('http_ok_per_sec'))} req/s",
                     f"k6, the cells' arrival model ({hc.get('rate')}/s for {hc.get('duration_s')} s, max {hc.get('max_vus')} VUs) "
                     f"against `GET /healthz` on both instances; {fmt(hc.get('dropped_iterations'))} arrivals dropped{capped}, "
                     f"p50 {fmt(hc.get('p50_ms'), 1)} ms, p99 {fmt(hc.get('p99_ms'), 1)} ms, {fmt(hc.get('unexpected'))} non-200"])
    floor = res.ceilings.get("http_moderate") or {}
    if floor.get("error"):
        rows.append([f"HTTP floor at {MODERATE_RATE}/s", "-", f"not measured: {floor['error'][:200]}"])
    elif floor:
        rows.append([f"HTTP floor at {fmt(floor.get('rate'))}/s", f"{fmt(floor.get('seckill_us_per_request'), 1)} µs/request",
                     f"seckill's CPU per `GET /healthz` offered by k6 at the moderate point's rate, for the same time, "
                     f"with its VU pool (max {floor.get('max_vus')}): {fmt(floor.get('ok'))} answered, "
                     f"{fmt(floor.get('dropped_iterations'))} arrivals dropped. Below saturation each request wakes the "
                     "worker on its own, so HTTP alone costs several times the wrk healthz cell's figure; the "
                     "moderate point's orders pay it too"])
    flush = res.ceilings.get("disk_flush")
    if flush:
        rows.append(["disk flush floor", f"p99 {fmt(flush['p99_ms'], 1)} ms, max {fmt(flush['max_ms'], 1)} ms",
                     f"{disk.describe(flush)}. Every order waits for PostgreSQL's WAL flush on this disk, and a "
                     "stalled flush stalls every batch in flight"])
    if pgc:
        rows.append(["`pg_order_tps`", f"{fmt(pgc.get('pg_order_tps'))} tps",
                     f"pgbench -M prepared, {pgc.get('clients')} clients, {pgc.get('seconds')} s: db-atomic's order "
                     f"(`seckill_commit` guard 'atomic': shard UPDATE + user upsert under the per-user limit "
                     f"{pgc.get('per_user_limit')} + orders (no part row for an order of one shard) in one transaction, quantity mix "
                     f"{pgc.get('qty_mix')}); avg latency {pgc.get('latency_avg_ms')} ms"])
    for key, how in (("redis", ""), ("redis_pipelined", ", pipelined")):
        for c, r in sorted((res.ceilings.get(key) or {}).items(), key=lambda kv: int(kv[0])):
            piped = f" -P {r.get('pipeline')}" if how else ""
            rows.append([f"`redis_pairs_per_sec` C={c}{how}", f"{fmt(r['pairs_per_sec'])} pairs/s",
                         f"redis-benchmark -c {c}{piped}: SET NX PX {fmt(r['set_nx_px']['rps'])}/s, "
                         f"EVALSHA release {fmt(r['evalsha_release']['rps'])}/s; 1/(1/a+1/b)"])
    return ["## Ceilings (same run, same servers)", ""] + table(["ceiling", "figure", "how"], "lrl", rows)


def run_cell_text(r: dict | None) -> str:
    """One lock run as `pairs/s (p99 µs)`."""
    if not r:
        return "-"
    if "error" in r:
        return "error"
    return f"{fmt(r.get('pairs_per_sec'))} (p99 {fmt(r.get('p99_us'))})"


def _by_mode(runs: list[dict]) -> dict:
    return {(r.get("mode"), r.get("concurrency")): r for r in runs}


def lock_run_cells(runs: list[dict]) -> list[str]:
    """C = 1, 16, 64 uncontended, C = 16 contended, then the Redis CPU per pair at C = 16."""
    by_c = _by_mode(runs)
    vals = [run_cell_text(by_c.get(("uncontended", c))) for c in LOCK_CONCURRENCIES]
    vals.append(run_cell_text(by_c.get(("contended", CONTENDED_C))))
    vals.append(fmt((by_c.get(("uncontended", CONTENDED_C)) or {}).get("redis_cpu_us_per_pair"), 1))
    return vals


LOCK_COLS = [f"C={c}" for c in LOCK_CONCURRENCIES] + [f"contended C={CONTENDED_C}", f"Redis CPU µs/pair C={CONTENDED_C}"]


def raw_redis_row(name: str, refs: dict) -> list[str]:
    return ([name] + [fmt(refs.get(str(c), {}).get("pairs_per_sec")) for c in LOCK_CONCURRENCIES]
            + ["-", fmt(refs.get(str(CONTENDED_C), {}).get("redis_cpu_us_per_pair"), 1)])


def peers_rows(lk: dict) -> list[str]:
    piped = lk.get("redis_pairs_pipelined") or {}
    rows = [["**lockkit** (lockctl)"] + lock_run_cells(lk.get("lockctl", []))]
    for lib in PEER_LIBRARIES:
        runs = [p for p in lk.get("peers", []) if p.get("library") == lib]
        if runs:
            rows.append([lib] + lock_run_cells(runs))

    def ratio_row(name: str, key: str) -> list[str]:
        vals = [f"{lk['ratios'][str(c)][key] * 100:.0f}%" if lk.get("ratios", {}).get(str(c), {}).get(key) else "-"
                for c in LOCK_CONCURRENCIES]
        return [name] + vals + ["-", "-"]

    rows.append(raw_redis_row("raw Redis pairs (redis-benchmark)", lk.get("redis_pairs") or {}))
    rows.append(ratio_row("lockkit / raw Redis", "vs_redis"))
    if piped:
        rows.append(raw_redis_row(f"raw Redis pairs, pipelined (redis-benchmark -P {lk.get('pipeline')})", piped))
        rows.append(ratio_row("lockkit / raw Redis pipelined (informational)", "vs_redis_pipelined"))
    return ([f"## lockkit vs peers (pairs/s and p99 µs of one pair; {lk['duration_ms']} ms per run; one Redis)", ""]
            + table(["library"] + LOCK_COLS, "l" + "r" * len(LOCK_COLS), rows)
            + ["Contended runs: polling peers barge (a releaser re-takes the lock while waiters sleep), which inflates "
               "their pairs/s; compare contended runs on p99 (see loadtest/peers/README.md).", ""])


def head_to_head_rows(lk: dict) -> list[str]:
    """Each round of the alternating lockkit/rslock runs, and the medians the targets use."""
    versus = lk.get("head_to_head") or {}
    if not versus:
        return []
    peer = lk.get("head_to_head_peer", "rslock")
    rows = []
    for c, sides in versus.items():
        for name in ("lockkit", peer):
            runs, median = sides[name]["runs"], sides[name]["median"]
            rounds = " / ".join("error" if "error" in r else fmt(r.get("pairs_per_sec")) for r in runs)
            rows.append([f"C={c}", f"**{name}**" if name == "lockkit" else name, rounds, fmt(median.get("pairs_per_sec")),
                         fmt(median.get("redis_cpu_us_per_pair"), 1), fmt(median.get("client_cpu_us_per_pair"), 1),
                         fmt(median.get("p99_us"))])
    return ([f"## lockkit and {peer} head to head (one Redis, uncontended, {lk['duration_ms']} ms per run)", ""]
            + table(["C", "library", "pairs/s, round by round", "median pairs/s", "median Redis CPU µs/pair",
                     "median client CPU µs/pair", "median p99 µs"], "llrrrrr", rows)
            + [f"Rounds alternate which side runs first (lockkit, then {peer} first, and so on), so that both meet "
               "the box in the same state; the lock targets use the medians. Client CPU: the benchmark process's "
               "own (the library, its Redis client and the harness loop), which shares the 2 cores with Redis: "
               "where a side's pairs/s go.", ""])


def backend_rows(lk: dict) -> list[str]:
    """"lockkit by backend": every backend the environment named, "not run (why)" for the others."""
    backends = lk.get("backends") or {}
    if not backends:
        return []
    rows = []
    for name, be in backends.items():
        label = f"**lockkit** {be.get('label', name)}"
        why = be.get("not_run") or be.get("error")
        rows.append([label, f"not run ({why[:160]})"] + [""] * (len(LOCK_COLS) - 1) if why
                    else [label] + lock_run_cells(be.get("runs", [])))
    for name, be in backends.items():
        if be.get("kind") == "redlock":
            for lib in REDLOCK_PEERS:
                runs = [p for p in be.get("peers", []) if p.get("library") == lib]
                if runs:
                    rows.append([f"{lib} {be.get('label', name)}"] + lock_run_cells(runs))
    for key, label in (("redis_pairs", "raw Redis pairs, one Redis (redis-benchmark)"),
                       ("redis_pairs_pipelined", f"raw Redis pairs, one Redis, pipelined (redis-benchmark -P {lk.get('pipeline')})")):
        if lk.get(key):
            rows.append(raw_redis_row(label, lk[key]))
    servers = "; ".join(f"{be.get('label', n)}: {', '.join(be['nodes'])}" for n, be in backends.items() if be.get("nodes"))
    return ([f"## lockkit by backend (pairs/s and p99 µs of one pair; {lk['duration_ms']} ms per run, same run)", ""]
            + table([""] + LOCK_COLS, "l" + "r" * len(LOCK_COLS), rows)
            + [f"Redis servers: {servers or '-'}. Backends come from URLs (REDIS_URL, LOCKKIT_SENTINEL_URL, "
               "LOCKKIT_REDLOCK_URL, LOCKKIT_CLUSTER_URL, ZOOKEEPER_URL, ETCD_URL, DATABASE_URL as postgres:// and postgres+advisory://); one "
               "whose URL is unset or that lockctl cannot run yet is shown as not run. Redis CPU µs/pair: utime+stime of "
               "the backend's redis-server processes (`/proc/PID/stat`, summed over its nodes) during the run, divided "
               "by its pairs (none for the other backends); for the raw Redis rows, the two redis-benchmark halves' CPU "
               "per request, added. Every server runs on the same cores as the client.", ""])


def target_rows(res: RunResult) -> list[str]:
    L = ["## Targets", ""] + table(["target", "result", "detail"], "lll",
                                   [[t.target, f"**{t.status}**", t.detail] for t in res.targets])
    if res.violations:
        L += ["## Correctness violations", ""] + [f"- {v}" for v in res.violations] + [""]
    return L


def notes(res: RunResult) -> list[str]:
    out = []
    for c in res.strategies:
        if c.busy:
            out.append(f"{c.name}: {c.busy} busy (503) answers")
        if c.kind == "throughput" and c.sold_out_reached:
            out.append(f"{c.name}: the stock ran out during the load: orders/s is not a steady-state rate")
        if c.service_log["warn"] or c.service_log["error"]:
            out.append(f"{c.name}: service log {c.service_log['warn']} WARN, {c.service_log['error']} ERROR lines")
    for c in res.capacity:
        if c.service_log["warn"] or c.service_log["error"]:
            out.append(f"{c.name} (wrk): service log {c.service_log['warn']} WARN, {c.service_log['error']} ERROR lines")
        if c.drain and not c.drain.startswith("200"):
            out.append(f"{c.name} (wrk): the gate's queue did not drain: {c.drain[:200]}")
    dropped = [c.dropped_iterations for c in res.strategies]
    if any(dropped):
        out.append(f"k6 dropped {min(dropped)} to {max(dropped)} arrivals per mission/throughput cell: with "
                   f"{res.settings['max_vus']} buyers in flight at most, the rest of the demand was not sent (by design: "
                   "demand is set well above what the service absorbs, so these cells' latencies are closed-loop "
                   "queueing times)")
    measured = {f"{c.strategy}/{c.shards}" for c in res.latency}
    for name in res.settings.get("latency_cells", []):
        if name not in measured:
            out.append(f"{name}: no latency points (no throughput cell of it ran, so there was no maximum to take shares of)")
    for c in res.latency:
        flag = point_flag(c)
        if flag:
            out.append(f"{c.name}: latency point NOT VALID: {flag}")
    return (["## Notes", ""] + [f"- {n}" for n in out] + [""]) if out else []


def markdown(res: RunResult) -> str:
    L = header(res) + capacity_rows(res)
    if not res.settings.get("only_capacity"):  # --only-capacity ran nothing else
        L += strategy_rows(res) + cpu_rows(res.strategies) + lock_internal_rows(res.strategies)
        L += latency_rows(res) + ceiling_rows(res)
        if res.lockkit.get("backends"):
            L += peers_rows(res.lockkit) + head_to_head_rows(res.lockkit) + backend_rows(res.lockkit)
    L += target_rows(res) + notes(res)
    L += [f"Raw data: `{res.files.get('json')}` (k6 summaries and service logs of this run under `{res.files.get('run_dir')}`).", ""]
    return "\n".join(L)
