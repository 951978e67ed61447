#!/usr/bin/env python3
"""`make demo`: the project's story in three acts, live, on two seckill instances.

  1. No lock: the `none` strategy oversells, and by how much.
  2. The default strategy (`owned-shards`): 10000 units over 20 shards sell exactly 10000.
  3. A fault: the same sale again, and in the middle of it instance b's PostgreSQL traffic is held
     by a fault proxy past b's lease, with its batch already on the wire; a takes b's shards over
     and sells; the held bytes are then delivered (the fence refuses them). Then b is frozen
     (SIGSTOP) past its lease and thawed. The books still balance.
     The same fault against `owned-unfenced` (the batch write without its fence predicate) is the
     control: its stale batch lands over a's sales and the sale oversells.

Each act prints a progress line every second (sold/total, units sold/s, p99, 503s, fence rejections,
who owns what), runs until sold out or a stated cap, and ends with k6's summary in one line and
an audit from PostgreSQL. A final table gives all acts. Exit status 1 if a guarantee of the
default strategy broke (oversold, stranded, inconsistent or lost in act 2 or 3), 2 on a set-up
error. Watch it live on the sale page: the URL is printed at the start.

Started by scripts/demo.sh (which starts Redis and PostgreSQL and builds the binaries). Standard
library only. Its processes are the bench's (loadtest/bench/processes.py): servers started through
scripts/server.sh, every one stopped by its PID at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

# Replaces this directory (Python's default first entry) with loadtest/, as the bench's run.py does.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.processes import Instance, Process, SetupError, http_json, read_address, server  # noqa: E402
from bench.settings import PROFILE_DIR, ROOT, SECKILL_BIN, TARGET_DIR  # noqa: E402

RUN = ROOT / ".run" / "demo"
FAULTPROXY_BIN = TARGET_DIR / PROFILE_DIR / "faultproxy"
K6 = ROOT / "scripts" / "k6.sh"
K6_SCRIPT = ROOT / "loadtest" / "k6" / "seckill.js"
BROWSER = ROOT / "scripts" / "browser.sh"
# The sale page during act 3, as the README shows it.
SCREENSHOT = ROOT / "loadtest" / "results" / "demo-act3.png"

# The demo's shard-lock lease: short, so that the faults of act 3 (each 1.5 leases) fit in a sale
# that lasts a few seconds.
LEASE_MS = int(os.environ.get("DEMO_LEASE_MS", "1000"))
# Instance a listens on PORT_BASE, b on the next port; 0 lets each take a free port.
PORT_BASE = int(os.environ.get("DEMO_PORT_BASE", "8081"))
TOTAL = int(os.environ.get("DEMO_TOTAL", "10000"))
SHARDS = int(os.environ.get("DEMO_SHARDS", "20"))
RATE = int(os.environ.get("DEMO_RATE", "2500"))
# Act 3 and its control run slower, so that the sale is still selling through all of its faults.
FAULT_RATE = int(os.environ.get("DEMO_FAULT_RATE", "1000"))


def say(text: str = "") -> None:
    print(text, flush=True)


class FaultProxy:
    """The chaos suite's TCP fault proxy in front of PostgreSQL, for instance b only; commands go
    to its standard input."""

    def __init__(self, upstream: str):
        (RUN / "faultproxy.addr").unlink(missing_ok=True)
        self.process = server("faultproxy", RUN, upstream, env={**os.environ, "FAULTPROXY_BIN": str(FAULTPROXY_BIN)},
                              stdin=subprocess.PIPE)
        self.address = read_address(RUN / "faultproxy.addr", self.process, "the fault proxy", timeout=20)

    def command(self, line: str) -> None:
        stdin = self.process.proc.stdin
        stdin.write((line + "\n").encode())
        stdin.flush()


def ask(method: str, url: str, body: dict | None = None, token: str | None = None,
        timeout: float = 5.0) -> tuple[int, dict]:
    """`http_json` for a live view: an instance that does not answer (frozen, cut off) is status 0."""
    try:
        status, answer = http_json(method, url, body, {"Authorization": f"Bearer {token}"} if token else None, timeout)
    except OSError:
        return 0, {}
    return status, answer if isinstance(answer, dict) else {}


def start_instance(name: str, port: int, database_url: str, token: str) -> Instance:
    """Instance `name` (its SECKILL_INSTANCE, the owner name the live view shows) on `port`."""
    env = dict(os.environ)
    env.update({"SECKILL_INSTANCE": name, "SECKILL_ADMIN_TOKEN": token, "DATABASE_URL": database_url,
                "SECKILL_LOCKS__LEASE_MS": str(LEASE_MS), "RUST_LOG": env.get("RUST_LOG", "warn")})
    instance = Instance(name, RUN, env, port)
    instance.wait_ready(timeout=20)
    return instance


def via(url: str, address: str) -> str:
    """`url` (postgres://user@host:port/db) with its host:port replaced by `address`."""
    parts = urllib.parse.urlsplit(url)
    credentials = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=credentials + address))


# ------------------------------------------------------------------------------------------------
# acts


@dataclass
class Act:
    number: str
    title: str
    why: str
    strategy: str
    expect_exact: bool
    faulty: bool = False
    cap_s: int = 30
    shards: int = SHARDS
    # Take a screenshot of the sale page once the stale batch was refused.
    screenshot: bool = False

    @property
    def rate(self) -> int:
        return FAULT_RATE if self.faulty else RATE


@dataclass
class FaultStep:
    """A fault action, run once `ready(seconds into the act, the live sale)` holds; dropped
    without running when `needed(the live sale)` no longer holds."""
    ready: object
    run: object
    # A heal (the act ends with everything healed anyway).
    heals: bool = False
    needed: object = None


@dataclass
class Outcome:
    act: Act
    sku: str = ""
    sold: int = 0
    total: int = 0
    oversold: int = 0
    stranded: int = 0
    consistent: bool = True
    fence_rejections: int = 0
    units_per_s: float = 0.0
    p99_ms: float | None = None
    unavailable: int = 0
    sold_out: bool = False
    capped_reason: str = ""
    k6_line: str = ""
    notes: list[str] = field(default_factory=list)

    def guarantee_broken(self) -> bool:
        return self.act.expect_exact and (self.oversold > 0 or self.stranded > 0 or not self.consistent
                                          or (self.sold_out and self.sold != self.total))


class Demo:
    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        self.run_id = time.strftime("%H%M%S", time.gmtime())
        self.proxy: FaultProxy | None = None
        self.instances: list[Instance] = []
        self.k6: Process | None = None
        self.camera: Process | None = None

    def start(self) -> None:
        for binary in (SECKILL_BIN, FAULTPROXY_BIN):
            if not binary.exists():
                raise SetupError(f"{binary} is missing: run `make demo` (scripts/demo.sh builds it)")
        database_url = os.environ.get("DATABASE_URL", "postgres://seckill@127.0.0.1:5440/seckill")
        upstream = urllib.parse.urlsplit(database_url)
        self.proxy = FaultProxy(f"{upstream.hostname}:{upstream.port or 5432}")
        self.instances = [
            start_instance("a", PORT_BASE, database_url, self.token),
            start_instance("b", PORT_BASE + 1 if PORT_BASE else 0, via(database_url, self.proxy.address), self.token),
        ]

    def stop(self) -> None:
        for process in [self.k6 and self.k6] + [i.process for i in self.instances] + [self.proxy and self.proxy.process]:
            if process:
                process.stop()

    @property
    def a(self) -> Instance:
        return self.instances[0]

    @property
    def b(self) -> Instance:
        return self.instances[1]

    def poll(self, sku: str) -> dict[str, dict]:
        views = {}
        for instance in self.instances:
            status, body = ask("GET", f"{instance.base}/v1/sales/{sku}/live", timeout=0.4)
            if status == 200:
                views[instance.name] = body
        return views

    def run_act(self, act: Act) -> Outcome:
        sku = f"demo-{self.run_id}-{act.number}"
        out = Outcome(act, sku=sku, total=TOTAL)
        say()
        say(f"== Act {act.number}: {act.title}")
        for line in act.why.splitlines():
            say(f"   {line}")
        say(f"   sale {sku}: {TOTAL} units over {act.shards} shard(s), strategy {act.strategy}, "
            f"k6 at {act.rate} orders/s on both instances; page: {self.a.base}/#/sale/{sku}")
        summary = RUN / f"{sku}.k6.json"
        env = dict(os.environ)
        argv = ["bash", str(K6), "--quiet", str(K6_SCRIPT),
                "-e", f"TARGETS={self.a.base},{self.b.base}", "-e", f"SKU={sku}", "-e", f"ADMIN_TOKEN={self.token}",
                "-e", "SETUP_SALE=1", "-e", f"TOTAL={TOTAL}", "-e", f"SHARDS={act.shards}", "-e", f"STRATEGY={act.strategy}",
                "-e", f"RATE={act.rate}", "-e", f"DURATION={act.cap_s}s", "-e", "USERS=100000", "-e", "REQUEST_TIMEOUT=5s",
                "-e", f"SUMMARY_PATH={summary}"]
        self.k6 = Process(argv, RUN / f"k6-{act.number}.log", env)
        started = time.time()
        # k6 creates the sale in its setup().
        while not self.poll(sku):
            if not self.k6.alive():
                raise SetupError(f"k6 ended before the sale existed; see {self.k6.log_path}")
            if time.time() - started > 60:
                raise SetupError(f"the sale was not created within 60 s; see {self.k6.log_path}")
            time.sleep(0.2)
        t0 = time.time()
        faults = self.fault_plan(sku if act.screenshot else None) if act.faulty else []
        last_sold, last_print = 0, t0
        while True:
            time.sleep(0.1)
            now = time.time() - t0
            if faults:
                live = self.live_sale(sku)
                while faults and faults[0].needed and not faults[0].needed(live):
                    faults.pop(0)
                while faults and faults[0].ready(now, live):
                    faults.pop(0).run(now)
            if time.time() - last_print < 1.0:
                continue
            views = self.poll(sku)
            sale = next(iter(views.values()))["sale"] if views else None
            if sale:
                out.sold = sale["sold"]
                out.fence_rejections = sale["fence_rejections"]
                rate = (out.sold - last_sold) / max(time.time() - last_print, 1e-3)
                last_sold = out.sold
                say(self.progress_line(now, sale, views, rate))
            else:
                say(f"   {now:5.1f}s  (no instance answered the live view)")
            last_print = time.time()
            if sale and out.sold >= TOTAL and not faults:
                out.sold_out = True
                break
            if not self.k6.alive():
                out.capped_reason = f"k6 finished its {act.cap_s} s of load before the sale sold out"
                break
            if now > act.cap_s + 5:
                out.capped_reason = f"stopped at the act's cap of {act.cap_s} s"
                break
        elapsed = time.time() - t0
        if act.faulty:  # heal whatever is still injected
            self.proxy.command("pass")
            self.b.process.signal(signal.SIGCONT)
        if self.k6.alive():
            self.k6.signal(signal.SIGINT)  # k6 stops the load, then runs its teardown and summary
            try:
                self.k6.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.k6.stop()
        self.finish(out, elapsed, summary)
        return out

    def live_sale(self, sku: str) -> dict:
        status, body = ask("GET", f"{self.a.base}/v1/sales/{sku}/live", timeout=0.4)
        return body["sale"] if status == 200 else {"shards": [], "fence_rejections": 0}

    def progress_line(self, now: float, sale: dict, views: dict[str, dict], rate: float) -> str:
        owners: dict[str, int] = {}
        for shard in sale["shards"]:
            if shard["remaining"] > 0 and shard["owner"]:
                owners[shard["owner"]] = owners.get(shard["owner"], 0) + 1
        p99 = [v["traffic"]["p99_ms_at_most"] for v in views.values() if v["traffic"]["p99_ms_at_most"] is not None]
        unavailable = sum(v["traffic"]["answers"].get(k, 0) for v in views.values() for k in ("unavailable", "busy"))
        absent = [i.name for i in self.instances if i.name not in views]
        owner_text = " ".join(f"{k}:{n}" for k, n in sorted(owners.items())) or "-"
        return (f"   {now:5.1f}s  sold {sale['sold']:>6}/{sale['total']}  {rate:7.0f} units/s  "
                f"p99 <= {max(p99) if p99 else '-':>5} ms  503s(10 s) {unavailable:>4}  "
                f"fence rejections {sale['fence_rejections']:>3}  shards with stock by owner {owner_text}"
                + (f"  [not answering: {', '.join(absent)}]" if absent else ""))

    def fault_plan(self, screenshot_of: str | None) -> list[FaultStep]:
        """Delay what b sends to PostgreSQL by 1.5 leases while it owns the shard, and again (at
        most three rounds) until the fence has refused a stale write: b may have just handed the
        shard over, or sent nothing during the delay. Then freeze b while it owns the shard
        again, and thaw it 1.5 leases later. Each wait for b to own the shard is bounded: after
        8 s the fault is applied anyway. With `screenshot_of`, the sale page of that sale is
        photographed while b is frozen."""
        hold_s = LEASE_MS / 1000 * 1.5
        proxy, b = self.proxy, self.b
        moments: dict[str, float] = {}

        def b_owns(sale: dict) -> bool:
            return any(s["owner"] == "b" and s["remaining"] > 0 for s in sale["shards"])

        def when_b_owns(after: str | None):
            def ready(now: float, sale: dict) -> bool:
                since = moments.get(after, 0.0) if after else 0.0
                return (not after or after in moments) and now >= since + 0.5 and (b_owns(sale) or now >= since + 8.0)
            return ready

        def later(after: str, delay: float):
            return lambda now, _sale: after in moments and now >= moments[after] + delay

        def cut(round_: int):
            def run(now: float) -> None:
                moments[f"cut{round_}"] = now
                again = "" if round_ == 1 else f" (round {round_}: no stale write was refused yet)"
                say(f"   >>> {now:4.1f}s fault: b owns the shard; from now on what b sends to PostgreSQL arrives "
                    f"{hold_s:.1f} s late (b's lease is {LEASE_MS / 1000:.1f} s): its next batch is on the wire{again}")
                proxy.command(f"delay-requests {int(hold_s * 1000)}")
            return run

        def deliver(round_: int):
            def run(now: float) -> None:
                moments[f"deliver{round_}"] = now
                moments["delivered"] = now
                say(f"   >>> {now:4.1f}s fault: b's delayed requests have reached PostgreSQL, after a took the shard over; "
                    "b's link is back to normal")
                proxy.command("pass")
            return run

        def freeze(now: float) -> None:
            moments["freeze"] = now
            say(f"   >>> {now:4.1f}s fault: b owns the shard again; b is frozen (SIGSTOP) for {hold_s:.1f} s, past its lease")
            b.process.signal(signal.SIGSTOP)
            if screenshot_of:
                self.photograph(f"{self.a.base}/#/sale/{screenshot_of}")

        def thaw(now: float) -> None:
            say(f"   >>> {now:4.1f}s fault: b is thawed (SIGCONT); its lease ran out while it slept")
            b.process.signal(signal.SIGCONT)

        def not_refused_yet(sale: dict) -> bool:
            return sale.get("fence_rejections", 0) == 0

        steps = [FaultStep(when_b_owns(None), cut(1)), FaultStep(later("cut1", hold_s + 0.2), deliver(1), heals=True)]
        for round_ in (2, 3):
            steps += [FaultStep(when_b_owns(f"deliver{round_ - 1}"), cut(round_), needed=not_refused_yet),
                      FaultStep(later(f"cut{round_}", hold_s + 0.2), deliver(round_), heals=True,
                                needed=lambda _sale, r=round_: f"cut{r}" in moments)]
        return steps + [FaultStep(when_b_owns("delivered"), freeze), FaultStep(later("freeze", hold_s), thaw, heals=True)]

    def photograph(self, url: str) -> None:
        """Screenshots `url` with headless Chromium in the background (skipped, with a note, if
        Chromium is not installed: `bash scripts/browser.sh install`)."""
        found = subprocess.run(["bash", str(BROWSER), "path"], capture_output=True, text=True)
        if found.returncode != 0:
            say("   (no Chromium: the page screenshot is skipped; bash scripts/browser.sh install)")
            return
        profile = RUN / "chromium-profile"
        argv = [found.stdout.strip(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--user-data-dir={profile}", "--window-size=1280,800", "--virtual-time-budget=2500",
                f"--screenshot={SCREENSHOT}", url]
        self.camera = Process(argv, RUN / "chromium.log", dict(os.environ))

    def finish(self, out: Outcome, elapsed: float, summary: Path) -> None:
        camera = self.camera
        if camera:
            try:
                camera.proc.wait(timeout=20)
                say(f"   the sale page during this act: {SCREENSHOT.relative_to(ROOT)}")
            except subprocess.TimeoutExpired:
                camera.stop()
            self.camera = None
        status, audit = ask("GET", f"{self.a.base}/v1/sales/{out.sku}/audit", timeout=30)
        if status != 200:
            out.notes.append(f"the audit could not be read (HTTP {status})")
            out.consistent = False
            return
        out.sold, out.total, out.oversold = audit["sold"], audit["total"], audit["oversold"]
        out.stranded, out.consistent, out.fence_rejections = audit["stranded"], audit["consistent"], audit["fence_rejections"]
        out.sold_out = out.sold_out or out.sold >= out.total
        try:
            report = json.loads(summary.read_text())
            metrics = report.get("metrics", {})
            latency = metrics.get("order_latency", {}).get("values", {})
            out.p99_ms = latency.get("p(99)")
            requests = metrics.get("http_reqs", {}).get("values", {}).get("count", 0)
            dropped = metrics.get("dropped_iterations", {}).get("values", {}).get("count", 0)
            outcomes = report.get("seckill", {}).get("outcomes", {})
            out.unavailable = int(outcomes.get("busy", 0))
            out.k6_line = (f"k6: {requests} requests, {outcomes.get('orders_accepted', 0)} accepted, "
                           f"{outcomes.get('sold_out', 0)} sold out, {outcomes.get('busy', 0)} 503 busy, "
                           f"{outcomes.get('server_errors', 0)} other 5xx (503 unavailable while a dependency was cut off "
                           f"included), {dropped} arrivals dropped (offered faster than served), p99 {out.p99_ms or 0:.0f} ms")
        except (OSError, ValueError):
            out.k6_line = f"k6 wrote no summary (see {self.k6.log_path if self.k6 else 'its log'})"
        sold_units = min(out.sold, out.total) if out.act.expect_exact else out.sold
        out.units_per_s = sold_units / elapsed if elapsed > 0 else 0.0
        say(f"   {out.k6_line}")
        verdict = ("OVERSOLD by %d units" % out.oversold) if out.oversold else (
            "exact: every unit sold once" if out.sold_out and out.consistent and not out.stranded else "see the notes")
        say(f"   audit (PostgreSQL): sold {out.sold} of {out.total}, oversold {out.oversold}, stranded {out.stranded}, "
            f"consistent {str(out.consistent).lower()}, fence rejections {out.fence_rejections}: {verdict}")
        if out.capped_reason:
            shards_say = " (the shards still show stock: the lost writes)" if out.oversold else ""
            say(f"   capped: {out.capped_reason}; orders for {out.sold} of {out.total} units{shards_say}")


ACTS = [
    Act("1", "no lock", "The `none` strategy reads a shard's stock and writes it back without any lock or check.\n"
        "Concurrent buyers read the same stock, and units are sold twice. Watch the shards: their stock falls\n"
        "far slower than orders are taken (writes overwrite each other), and the audit counts the orders.",
        "none", expect_exact=False, cap_s=12),
    Act("2", "the default strategy", "`owned-shards`: each shard is owned by one instance through its lock, sold from memory and\n"
        "committed to PostgreSQL in batches that only land while the owner's fence is current.", "owned-shards",
        expect_exact=True, cap_s=25),
    Act("3", "a fault, with the fence", "The same 10000 units, on one shard so that the takeover is certain (with 20, a could simply\n"
        "sell other shards). While b owns the shard, b is cut off from PostgreSQL past its lease with a batch on the\n"
        "wire; a takes the shard over and sells; then the held bytes arrive. Then b is frozen past its lease.\n"
        "The fence must refuse every stale write.", "owned-shards", expect_exact=True, faulty=True, cap_s=30, shards=1,
        screenshot=True),
    Act("3c", "the same fault, without the fence (control)", "`owned-unfenced` is act 3 without the `fence = t` predicate on the batch write: the stale\n"
        "batch overwrites a's sales with b's old stock, and those units are sold again.", "owned-unfenced",
        expect_exact=False, faulty=True, cap_s=30, shards=1),
]


def table(outcomes: list[Outcome]) -> None:
    say()
    say("| act | strategy | sold / total | oversold | stranded | consistent | fence rejections | units sold/s | k6 p99 ms | verdict |")
    say("|---|---|---:|---:|---:|---|---:|---:|---:|---|")
    for o in outcomes:
        if o.act.expect_exact:
            verdict = "BROKEN" if o.guarantee_broken() else ("exact" if o.sold_out else "not sold out (capped)")
        else:
            verdict = "oversold, as expected" if o.oversold > 0 else "no oversell this time"
        p99 = f"{o.p99_ms:.0f}" if o.p99_ms is not None else "-"
        say(f"| {o.act.number} {o.act.title} | `{o.act.strategy}` | {o.sold} / {o.total} | {o.oversold} | {o.stranded} | "
            f"{str(o.consistent).lower()} | {o.fence_rejections} | {o.units_per_s:.0f} | {p99} | {verdict} |")


def main() -> int:
    RUN.mkdir(parents=True, exist_ok=True)
    demo = Demo()
    outcomes: list[Outcome] = []
    try:
        demo.start()
        say(f"Two instances: a {demo.a.base} and b {demo.b.base} (b reaches PostgreSQL through a fault proxy).")
        say(f"Watch it on the sale page: {demo.a.base}/   (read-only without the admin token)")
        chosen = os.environ.get("DEMO_ACTS", "").split(",") if os.environ.get("DEMO_ACTS") else None
        for act in ACTS:
            if chosen is None or act.number in chosen:
                outcomes.append(demo.run_act(act))
    except SetupError as e:
        say(f"demo set-up failed: {e}")
        return 2
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        demo.stop()
    table(outcomes)
    broken = [o for o in outcomes if o.guarantee_broken()]
    say()
    if broken:
        say("A GUARANTEE BROKE: " + ", ".join(f"act {o.act.number}" for o in broken) + " (see above)")
        return 1
    say("The default strategy sold every unit exactly once, also through the faults; the controls show what the lock "
        "and the fence prevent.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
