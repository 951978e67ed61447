"""The charts render, and a latency point k6 could not offer fully is drawn apart."""

import xml.etree.ElementTree as ET

from bench.report_svg import svg_chart, svg_latency
from factories import cell, control, run

SVG = "{http://www.w3.org/2000/svg}"


def test_the_latency_chart_draws_valid_points_on_the_line_and_flagged_ones_hollow():
    points = [cell("db-atomic", kind="latency", fraction=f, rate=r, p99_ms=p)
              for f, r, p in ((0.25, 200, 10.0), (0.5, 400, 15.0))]
    points.append(cell("db-atomic", kind="latency", fraction=0.75, rate=600, p99_ms=90.0, dropped_iterations=5))

    root = ET.fromstring(svg_latency(run(latency=points)))

    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 1 and len(lines[0].get("points").split()) == 2
    circles = root.findall(f"{SVG}circle")
    assert [c.get("fill") for c in circles].count("#ffffff") == 1


def test_a_point_run_in_rounds_is_drawn_once_at_its_median_round():
    rounds = [cell("owned-shards", kind="latency", fraction=0.6, rate=2000, round_no=n, orders=20_000, k6_wall_s=10.0,
                   p99_ms=p, cpu_profile={"seckill": cpu}) for n, p, cpu in ((1, 11.0, 40.0), (2, 22.0, 20.0), (3, 33.0, 30.0))]
    points = [cell("owned-shards", kind="latency", fraction=0.5, rate=1700, p99_ms=9.0)] + rounds

    root = ET.fromstring(svg_latency(run(latency=points)))

    assert len(root.findall(f"{SVG}polyline")[0].get("points").split()) == 2
    assert len(root.findall(f"{SVG}circle")) == 2


def test_the_bar_chart_renders():
    root = ET.fromstring(svg_chart(run(strategies=[control(), cell("owned-shards", 1), cell("owned-shards", 20)])))

    assert len(root.findall(f"{SVG}rect")) > 4
