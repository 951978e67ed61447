"""The two charts of latest.md, as standalone SVG: orders/s and oversold units per strategy
(latest.svg), and p99 against offered load per strategy (latest-latency.svg). Pure: text out."""

from __future__ import annotations

import html

from .cells import CellResult
from .latency import medians, point_flag
from .result import RunResult
from .settings import SHARDS, STRATEGIES

e = html.escape
LINE_COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#4a5568"]


def nice_ceiling(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** int(f"{v:e}".split("e")[1])
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * exp >= v:
            return m * exp
    return 10 * exp


def k(v: float) -> str:
    return f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"


class Canvas:
    """An SVG being drawn: a list of elements and the plot area's left/right margins."""

    def __init__(self, width: int, height: int, left: int = 80, right: int = 30):
        self.W, self.H, self.left, self.right = width, height, left, right
        self.out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
                    'font-family="Helvetica, Arial, sans-serif" font-size="12">',
                    f'<rect width="{width}" height="{height}" fill="#ffffff"/>']

    def text(self, x: float, y: float, s: str, **attrs: str) -> None:
        a = " ".join(f'{k_.replace("_", "-")}="{v}"' for k_, v in attrs.items())
        self.out.append(f'<text x="{x:.1f}" y="{y:.1f}" {a}>{e(s)}</text>')

    def y_axis(self, top: float, h: float, ymax: float, label: str, fmt_tick) -> None:
        for i in range(6):
            y = top + h - h * i / 5
            self.out.append(f'<line x1="{self.left}" y1="{y:.1f}" x2="{self.W - self.right}" y2="{y:.1f}" stroke="#e2e8f0"/>')
            self.text(self.left - 8, y + 4, fmt_tick(ymax * i / 5), text_anchor="end", fill="#444")
        self.out.append(f'<line x1="{self.left}" y1="{top + h}" x2="{self.W - self.right}" y2="{top + h}" stroke="#333"/>')
        self.out.append(f'<text x="18" y="{top + h / 2:.1f}" transform="rotate(-90 18 {top + h / 2:.1f})" '
                        f'text-anchor="middle" fill="#333">{e(label)}</text>')

    def hline(self, top: float, h: float, ymax: float, v: float, color: str, dash: str, width: int, label: str,
              label_color: str, at_left: bool = False) -> None:
        y = top + h - h * min(v, ymax) / ymax
        self.out.append(f'<line x1="{self.left}" y1="{y:.1f}" x2="{self.W - self.right}" y2="{y:.1f}" stroke="{color}" '
                        f'stroke-width="{width}" stroke-dasharray="{dash}"/>')
        if at_left:
            self.text(self.left + 4, y - 6, label, fill=label_color)
        else:
            self.text(self.W - self.right - 4, y - 6, label, text_anchor="end", fill=label_color)

    def done(self) -> str:
        return "\n".join(self.out + ["</svg>"]) + "\n"


def subtitle(res: RunResult, load: str) -> str:
    dirty = " (dirty)" if res.git.get("dirty") else ""
    return (f"{res.started_at} · commit {res.git.get('short')}{dirty} · {load}, 2 instances · "
            f"{res.machine.get('nproc')} CPU · mode {res.mode}")


def svg_chart(res: RunResult) -> str:
    cells = [c for c in res.strategies if c.kind == "mission"]
    strategies = [s for s in STRATEGIES if any(c.strategy == s for c in cells)]
    by = {(c.strategy, c.shards): c for c in cells}
    colors, over_colors = {1: "#90b4dc", 20: "#2b6cb0"}, {1: "#f4a3a3", 20: "#c53030"}
    top1, h1 = 70, 300
    top2, h2 = top1 + h1 + 90, 170
    cv = Canvas(960, top2 + h2 + 70)
    group_w = (cv.W - cv.left - cv.right) / max(1, len(strategies))
    bar_w = min(44, group_w / 3)
    tps = (res.ceilings.get("pg") or {}).get("pg_order_tps")
    http_ok = (res.ceilings.get("http") or {}).get("http_ok_per_sec")
    y1max = nice_ceiling(max([c.orders_per_sec or 0 for c in cells] + [tps or 0, http_ok or 0, 1]) * 1.08)
    y2max = nice_ceiling(max([c.oversold or 0 for c in cells] + [1]) * 1.1)
    cv.text(cv.left, 28, "Orders/s per stock strategy, 1 vs 20 shards", font_size="17", font_weight="bold")
    cv.text(cv.left, 48, subtitle(res, f"{res.settings['total']} units, {res.settings['rate']} arrivals/s"), fill="#555")

    def bars(top: float, h: float, ymax: float, value_of, palette: dict) -> None:
        for gi, s in enumerate(strategies):
            gx = cv.left + gi * group_w + group_w / 2
            for bi, sh in enumerate(SHARDS):
                c = by.get((s, sh))
                v = (value_of(c) or 0) if c else 0
                x = gx + (bi - 1) * bar_w - 2 + (bi * 4)
                bh = h * min(v, ymax) / ymax
                cv.out.append(f'<rect x="{x:.1f}" y="{top + h - bh:.1f}" width="{bar_w:.1f}" height="{bh:.1f}" fill="{palette[sh]}">'
                              f'<title>{e(s)}, {sh} shard(s): {v:,.0f}</title></rect>')
                if c:
                    cv.text(x + bar_w / 2, top + h - bh - 4, f"{v:,.0f}", text_anchor="middle", font_size="11", fill="#222")
            cv.text(gx, top + h + 18, s, text_anchor="middle", fill="#222")

    def legend(y: float, palette: dict) -> None:
        lx = cv.W - cv.right - 190
        for sh in SHARDS:
            cv.out.append(f'<rect x="{lx}" y="{y}" width="12" height="12" fill="{palette[sh]}"/>')
            cv.text(lx + 17, y + 10, f"{sh} shard{'s' if sh > 1 else ''}")
            lx += 95

    cv.y_axis(top1, h1, y1max, "orders per second", k)
    bars(top1, h1, y1max, lambda c: c.orders_per_sec, colors)
    if tps:
        cv.hline(top1, h1, y1max, tps, "#d69e2e", "6 4", 2, f"pgbench order ceiling {tps:,.0f} tps", "#975a16")
        cv.hline(top1, h1, y1max, 0.6 * tps, "#d69e2e", "2 4", 1, "60% of it (target)", "#975a16")
    if http_ok:
        cv.hline(top1, h1, y1max, http_ok, "#38a169", "10 4", 2, f"HTTP ceiling (GET /healthz) {http_ok:,.0f} req/s",
                 "#276749", at_left=True)
    legend(top1 - 14, colors)
    cv.text(cv.left, top2 - 30, "Oversold units (audit) — must be 0 for all but none", font_size="15", font_weight="bold")
    cv.y_axis(top2, h2, y2max, "oversold units", lambda v: f"{v:.0f}")
    bars(top2, h2, y2max, lambda c: c.oversold, over_colors)
    legend(top2 - 42, over_colors)
    cv.text(cv.left, cv.H - 18, "orders/s = committed orders / time from load start to the last order (sell-out) or to the "
            "end of the load; see docs/bench.md", fill="#666", font_size="11")
    return cv.done()


def latency_series(points: list[CellResult]) -> dict[str, list[CellResult]]:
    """strategy/shards -> its points by offered rate (valid and flagged alike); of a point run in
    rounds, the median round alone."""
    taken = medians(points)
    out: dict[str, list[CellResult]] = {}
    for c in points:
        if c.spec.round_no and c not in taken:
            continue
        out.setdefault(f"{c.strategy}/{c.shards}", []).append(c)
    return {name: sorted(ps, key=lambda c: c.spec.rate) for name, ps in out.items()}


def svg_latency(res: RunResult) -> str:
    """p99 of accepted orders against offered arrivals/s, one line per strategy; a point k6 could
    not offer fully (dropped arrivals) is drawn hollow in red and left off the line."""
    series = latency_series(res.latency)
    top, h = 70, 330
    cv = Canvas(960, top + h + 110, right=210)  # the legend goes right of the plot
    plot_w = cv.W - cv.left - cv.right
    xmax = nice_ceiling(max([c.spec.rate for c in res.latency] + [1]) * 1.05)
    ymax = nice_ceiling(max([c.p99_ms or 0 for c in res.latency] + [1]) * 1.1)
    cv.text(cv.left, 28, "p99 order latency at fixed offered loads (open model, below saturation)", font_size="17",
            font_weight="bold")
    cv.text(cv.left, 48, subtitle(res, f"{res.settings.get('latency_duration_s')} s per point"), fill="#555")
    cv.y_axis(top, h, ymax, "p99 ms (accepted orders)", lambda v: f"{v:.0f}")

    def xy(c: CellResult) -> tuple[float, float]:
        return cv.left + plot_w * c.spec.rate / xmax, top + h - h * min(c.p99_ms or 0, ymax) / ymax

    for i in range(6):
        x = cv.left + plot_w * i / 5
        cv.text(x, top + h + 18, k(xmax * i / 5), text_anchor="middle", fill="#444")
    cv.text(cv.left + plot_w / 2, top + h + 40, "offered arrivals per second", text_anchor="middle", fill="#333")
    for n, (name, pts) in enumerate(series.items()):
        color = LINE_COLORS[n % len(LINE_COLORS)]
        valid = [c for c in pts if not point_flag(c)]
        if len(valid) > 1:
            cv.out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="'
                          + " ".join(f"{x:.1f},{y:.1f}" for x, y in map(xy, valid)) + '"/>')
        for c in pts:
            x, y = xy(c)
            flag = point_flag(c)
            fill, stroke = ("#ffffff", "#c53030") if flag else (color, color)
            tip = f"{name} at {c.spec.rate}/s ({(c.spec.fraction or 0) * 100:.0f}%): p99 {c.p99_ms} ms" + (f"; NOT VALID: {flag}" if flag else "")
            cv.out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="{fill}" stroke="{stroke}" stroke-width="2">'
                          f'<title>{e(tip)}</title></circle>')
        ly = top + 10 + n * 22
        lx = cv.W - cv.right + 20
        cv.out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 22}" y2="{ly}" stroke="{color}" stroke-width="3"/>')
        cv.text(lx + 28, ly + 4, name)
    cv.text(cv.left, cv.H - 30, "Each point: a fresh sale offered 25/50/75% of the strategy's throughput cell in the same run; "
            "hollow red: k6 dropped arrivals (not valid).", fill="#666", font_size="11")
    cv.text(cv.left, cv.H - 14, "See docs/bench.md, 'Latency at fixed offered loads'.", fill="#666", font_size="11")
    return cv.done()
