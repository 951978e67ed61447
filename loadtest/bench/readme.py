"""The READMEs' generated tables: `make bench` and `make chaos` write them between markers, with
the run they came from, so that no README quotes a figure older than the last run.

    <!-- generated: bench (make bench writes this; do not edit) -->
    ...
    <!-- end: bench -->

Each block opens with a `run:` comment naming the results file's run (its start time and commit);
`stale_blocks` compares it with the results file, and the tests fail on a README left behind.

    python3 -m loadtest.bench.readme chaos     rewrite the chaos blocks from chaos-latest.json
    python3 -m loadtest.bench.readme bench     rewrite the bench blocks from latest.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .report_md import fmt, table
from .settings import CAPACITY_STRATEGIES
from .targets import rslock_sides

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "loadtest" / "results"
# Which README carries which generated block, and the results file each comes from.
BLOCKS = {
    "bench": (["README.md", "loadtest/README.md"], "latest.json"),
    "chaos": (["README.md", "loadtest/README.md"], "chaos-latest.json"),
}
CELL_NAMES = {"capacity": "capacity", "storm": "retry storm", "hot-users": "hot users"}


def run_stamp(results: dict) -> str:
    """What names a run: its start time and commit."""
    commit = (results.get("git") or {}).get("short") or (results.get("commit") or "")[:7]
    return f"{results.get('started_at')} {commit}"


def replace_block(text: str, name: str, lines: list[str]) -> str:
    """`text` with the block `name` replaced by `lines`; the markers must be there already."""
    pattern = re.compile(rf"(<!-- generated: {name} [^\n]*-->\n)(.*?)(<!-- end: {name} -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"no generated block {name!r}: add its markers first")
    return pattern.sub(lambda m: m.group(1) + "\n".join(lines) + "\n" + m.group(3), text, count=1)


def block_stamp(text: str, name: str) -> str | None:
    """The run a README's block `name` was written from, or None without such a block."""
    m = re.search(rf"<!-- generated: {name} [^\n]*-->\n<!-- run: ([^>]*?) -->", text)
    return m.group(1) if m else None


def per_order(cost: dict | None) -> str:
    if not cost:
        return "-"
    return f"{fmt(cost['total'])} ({fmt(cost['seckill'])} + {fmt(cost['postgres'])} + {fmt(cost['redis'])})"


def peak_rss(res: dict) -> str:
    """The instances' peak resident sets over the run, as the table's header sentence ends ('' for
    a run without them)."""
    peaks = [v for _, v in sorted((res.get("service_peak_rss_mib") or {}).items()) if v is not None]
    if not peaks:
        return ""
    return f" Peak RSS of each seckill instance over the run: {' and '.join(f'{v:.1f}' for v in peaks)} MiB."


def table_cells(cells: list[dict]) -> list[dict]:
    """The wrk cells the table shows: each cell's representing run only (a capacity run other than
    the strategy's capacity stands for nothing), kind by kind as they ran, strategies in the bench's
    order (the median runs of the rounds come from different rounds)."""
    shown = [c for c in cells if c.get("represents", 1)]
    kinds = list(dict.fromkeys(c["kind"] for c in shown))
    place = {s: i for i, s in enumerate(CAPACITY_STRATEGIES)}
    return sorted(shown, key=lambda c: (kinds.index(c["kind"]), place.get(c["strategy"], -1)))


def bench_lines(res: dict) -> list[str]:
    """The costs-and-speeds table: orders at capacity, in a retry storm and with hot users per
    strategy, the HTTP floor, and a fenced lock pair against rslock."""
    m, g = res.get("machine") or {}, res.get("git") or {}
    state = " (dirty tree)" if g.get("dirty") else ""
    rows = []
    for c in table_cells(res.get("capacity") or []):
        if c["kind"] == "healthz":
            rows.append(["HTTP floor (`GET /healthz`)", "-", f"{fmt(c['decided_per_sec'])} requests",
                         per_order(c.get("cpu_us_per_request")) + " per request", fmt(c["p99_ms"], 1)])
            continue
        hot = c["kind"] == "hot-users"
        speed = f"{fmt(c['decided_per_sec'])} decided" if hot else f"{fmt(c['orders_per_sec'])} orders"
        cost = per_order(c.get("cpu_us_per_request") if hot else c.get("cpu_us_per_order"))
        errors = c["server_5xx"] + c["busy_503"]
        note = f"; {fmt(errors)} answered 5xx" if errors else ""
        runs = c.get("represents", 1)
        chosen = f" (median of {runs} runs, {c['connections']} connections)" if runs > 1 else ""
        name = CELL_NAMES.get(c["kind"], c["kind"]) + chosen
        rows.append([name, f"`{c['strategy']}`", speed,
                     cost + (" per request" if hot else "") + note, fmt(c["p99_ms"], 1)])
    lk = res.get("lockkit") or {}
    mine, theirs, source = rslock_sides(lk)
    for name, sides in (("lockkit", mine), ("rslock", theirs)):
        c16, c64 = sides.get(16) or {}, sides.get(64) or {}
        if c16:
            rows.append([f"lock pair, one Redis (C=16 / 64){source}", f"`{name}`",
                         f"{fmt(c16.get('pairs_per_sec'))} / {fmt(c64.get('pairs_per_sec'))} pairs",
                         f"{fmt(c16.get('redis_cpu_us_per_pair'), 1)} Redis only, per pair", fmt((c16.get('p99_us') or 0) / 1000, 1)])
    return ([f"<!-- run: {run_stamp(res)} -->",
             f"`make bench` on commit `{g.get('short')}`{state}, {str(res.get('started_at'))[:10]}: {m.get('nproc')} CPU "
             f"({m.get('cpu_model')}), Redis {m.get('redis_server')}, PostgreSQL "
             f"{str(m.get('postgres_server')).split()[0]}, load generator and servers on the same cores. Server CPU is "
             "utime + stime of the seckill and postgres processes and the service's redis-server from `/proc`; every cell and its "
             "checks are in [loadtest/results/latest.md](loadtest/results/latest.md)." + peak_rss(res), ""]
            + table(["cell", "strategy", "per second", "server CPU µs per order (seckill + PostgreSQL + Redis)",
                     "p99 ms"], "llrlr", rows)[:-1])


def chaos_lines(res: dict) -> list[str]:
    """The fault rows: what was done, and what the checker found."""
    rows = []
    for s in res.get("scenarios") or []:
        verdict = "passed" if s.get("passed") else f"**{s.get('status', 'failed')}**"
        rows.append([f"`{s['scenario']}`", f"`{s['strategy']}`", fmt(s.get("acknowledged")), fmt(s.get("lost")),
                     fmt(s.get("oversold")), fmt(s.get("duplicates")), verdict])
    mode = res.get("mode")
    return ([f"<!-- run: {run_stamp(res)} -->",
             f"`make chaos` ({mode}) on commit `{str(res.get('commit'))[:7]}`, {str(res.get('started_at'))[:10]}: "
             f"{'PASSED' if res.get('passed') else '**FAILED**'}. A control row passes when it shows the failure its "
             "protection prevents; each row's faults and checks are in "
             "[loadtest/results/chaos-latest.md](loadtest/results/chaos-latest.md).", ""]
            + table(["row", "strategy", "acknowledged", "lost", "oversold", "duplicates", "verdict"], "llrrrrl", rows)[:-1])


LINES = {"bench": bench_lines, "chaos": chaos_lines}


def write_blocks(name: str, results: dict, root: Path = ROOT) -> list[str]:
    """Rewrites block `name` in every README that carries it; returns the files written."""
    readmes, _ = BLOCKS[name]
    lines = LINES[name](results)
    written = []
    for readme in readmes:
        path = root / readme
        text = path.read_text()
        new = replace_block(text, name, lines)
        if new != text:
            path.write_text(new)
            written.append(readme)
    return written


def stale_blocks(root: Path = ROOT) -> list[str]:
    """Every generated block whose run is not the one of its results file."""
    stale = []
    for name, (readmes, results_file) in BLOCKS.items():
        results_path = root / "loadtest" / "results" / results_file
        if not results_path.exists():
            continue
        want = run_stamp(json.loads(results_path.read_text()))
        for readme in readmes:
            have = block_stamp((root / readme).read_text(), name)
            if have != want:
                stale.append(f"{readme}: the {name} table is from run {have!r}, {results_file} from {want!r}")
    return stale


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in BLOCKS:
        print(__doc__, file=sys.stderr)
        return 2
    name = argv[1]
    results = json.loads((RESULTS / BLOCKS[name][1]).read_text())
    for readme in write_blocks(name, results):
        print(f"[readme] {readme}: {name} table rewritten from {BLOCKS[name][1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
