"""Where a run's result goes: the files in loadtest/results (smoke: smoke-latest.json only;
--only-capacity: capacity-latest.json and .md only; an aborted full run leaves the latest.* of the
last complete one alone) and the console summary."""

from __future__ import annotations

import json
from pathlib import Path

from . import locks
from .processes import log, rel
from .readme import RESULTS, write_blocks
from .report_md import LATENCY_SVG, fmt, markdown, wrk_cost
from .report_svg import svg_chart, svg_latency
from .result import RunResult, prune_results


def write_results(res: RunResult, results: Path, stamp: str, complete: bool) -> None:
    def path(name: str) -> str:
        return rel(results / name)

    if res.mode == "smoke":
        res.files["json"] = path("smoke-latest.json")
        (results / "smoke-latest.json").write_text(res.dumps())
        return
    if res.settings.get("only_capacity"):  # a quick iteration must not replace the full run's latest.*
        res.files.update({"json": path("capacity-latest.json"), "markdown": path("capacity-latest.md")})
        (results / "capacity-latest.json").write_text(res.dumps())
        (results / "capacity-latest.md").write_text(markdown(res))
        return
    res.files["json"] = path(f"{stamp}.json")
    if complete:
        res.files.update({"latest": path("latest.json"), "markdown": path("latest.md"), "svg": path("latest.svg")})
        if res.latency:
            res.files["latency_svg"] = path(LATENCY_SVG)
    text = res.dumps()
    (results / f"{stamp}.json").write_text(text)
    removed = prune_results(results, f"{stamp}.json")
    if removed:
        log(f"removed older timestamped results: {', '.join(removed)}")
    if not complete:  # an aborted run does not replace the latest complete one
        log("run aborted: latest.* left as they were")
        return
    (results / "latest.json").write_text(text)
    if results.resolve() == RESULTS.resolve():  # the READMEs quote the project's results only
        for readme in write_blocks("bench", json.loads(text)):
            log(f"{readme}: costs-and-speeds table rewritten")
    (results / "latest.md").write_text(markdown(res))
    (results / "latest.svg").write_text(svg_chart(res))
    if res.latency:
        (results / LATENCY_SVG).write_text(svg_latency(res))


def print_summary(res: RunResult) -> None:
    print()
    print(f"seckill bench ({res.mode}) {res.started_at}  {res.duration_s:.0f} s")
    print(f"{'strategy':16} {'shards':>6} {'cell':>4} {'orders/s':>9} {'p50ms':>7} {'p99ms':>8} {'sold':>7} {'over':>5} "
          f"{'strand':>6} {'lost':>4} {'busy':>6} {'err':>4} {'drop':>6} {'redis/o':>7} {'pg/o':>6}  k6")
    for c in res.strategies + res.latency:
        kind = {"mission": "m", "throughput": "tp"}.get(c.kind, f"{(c.spec.fraction or 0) * 100:.0f}%")
        print(f"{c.strategy:16} {c.shards:>6} {kind:>4} {c.orders_per_sec:>9.0f} {fmt(c.p50_ms, 1):>7} {fmt(c.p99_ms, 1):>8} "
              f"{fmt(c.sold):>7} {fmt(c.oversold):>5} {fmt(c.stranded):>6} {fmt(c.acked_missing):>4} {c.busy:>6} {c.errors:>4} "
              f"{c.dropped_iterations:>6} {fmt(c.redis_cmds_per_order, 3):>7} {fmt(c.pg_commits_per_order, 3):>6}  "
              f"{c.k6_verdict}({c.k6_exit})")
    if res.capacity:
        print(f"{'wrk cell':32} {'orders/s':>9} {'decided/s':>9} {'requests':>9} {'non-2xx':>8} {'503':>6} {'p50ms':>7} "
              f"{'p99ms':>7} {'µs/order (sk+pg+rd=total)':>26} {'wrk µs/req':>10}")
        for c in res.capacity:
            print(f"{c.name:32} {c.orders_per_sec:>9.0f} {c.decided_per_sec:>9.0f} {c.requests:>9} {c.requests - c.ok_2xx:>8} "
                  f"{c.busy_503:>6} {fmt(c.p50_ms, 1):>7} {fmt(c.p99_ms, 1):>7} {wrk_cost(c):>26} {fmt(c.wrk_us_per_request, 1):>10}"
                  + ("  VIOLATION" if c.violations else ""))
    if res.ceilings:
        print(f"http_ok_per_sec {(res.ceilings.get('http') or {}).get('http_ok_per_sec')}, "
              f"pg_order_tps {res.ceilings.get('pg_order_tps')}, redis_pairs_per_sec (C=50) {res.ceilings.get('redis_pairs_per_sec')}")
    for name, be in (res.lockkit.get("backends") or {}).items():
        if be.get("not_run") or be.get("error"):
            print(f"  lockctl {name:18} not run: {be.get('not_run') or be.get('error')}")
            continue
        runs = {(r.get("mode"), r.get("concurrency")): r for r in be["runs"]}
        keys = [("uncontended", c) for c in locks.LOCK_CONCURRENCIES] + [("contended", locks.CONTENDED_C)]
        print(f"  lockctl {name:18} " + " / ".join("err" if "error" in runs.get(k_, {}) else
                                                   f"{fmt(runs.get(k_, {}).get('pairs_per_sec'))} p99 {fmt(runs.get(k_, {}).get('p99_us'))}"
                                                   for k_ in keys))
    if res.mode != "smoke":
        for t in res.targets:
            print(f"  {t.status:4}  {t.target}: {t.detail}")
    print(f"results: {res.files.get('json')}")
