#!/usr/bin/env python3
"""Static checks of the demo stack's Grafana files, for machines where Grafana cannot run.

Grafana has no Debian package, and no container registry is reachable on the project's
machines, so scripts/compose.sh cannot start it. Instead this checks what Grafana would read:

* the provisioned datasources (name, type, uid, url; uids unique; one default);
* the dashboard provider's folder is where docker-compose.yml mounts deploy/grafana/dashboards,
  and GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH names a dashboard file that is mounted there;
* every dashboard: valid JSON, a uid and a title, unique panel ids, each panel with a gridPos and
  a datasource whose uid is provisioned, each query with an expression, every `$variable` used
  defined in the templating list;
* with --names (Prometheus' /api/v1/label/__name__/values after a sale): the metric names the
  dashboards query that Prometheus has seen. A name is seen if it or one of its histogram/summary
  series is; a name that is missing is reported, and is an error only if it is in
  EMITTED_BY_A_SALE (names that any sale produces, so a missing one means a broken query).

Usage: grafana_check.py [--compose docker-compose.yml] --grafana deploy/grafana [--names FILE]
Exits 1 with one line per problem.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

# Every sale counts orders and their latency, takes shard locks and renews them; Prometheus
# itself records `up`. Fence rejections and lost leases need a fault, so they may be absent.
EMITTED_BY_A_SALE = {
    "seckill_orders_total",
    "seckill_order_duration_seconds",
    "lockkit_acquire_attempts_total",
    "up",
}
METRIC = re.compile(r"\b((?:seckill|lockkit)_[a-z0-9_]+|up)\b(?=\s*[{\[)]|\s*$)")
VARIABLE = re.compile(r"\$(?:\{)?([A-Za-z_][A-Za-z0-9_]*)")
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}
SERIES_SUFFIXES = ("_bucket", "_sum", "_count")


def check_datasources(provisioning: Path) -> tuple[list[str], set[str]]:
    problems, uids, defaults = [], set(), 0
    files = sorted((provisioning / "datasources").glob("*.y*ml"))
    if not files:
        return [f"{provisioning}/datasources: no datasource file"], uids
    for path in files:
        for ds in yaml.safe_load(path.read_text()).get("datasources") or []:
            for key in ("name", "type", "uid", "url"):
                if not ds.get(key):
                    problems.append(f"{path}: datasource {ds.get('name')!r} has no {key}")
            if ds.get("uid") in uids:
                problems.append(f"{path}: datasource uid {ds['uid']!r} is provisioned twice")
            uids.add(ds.get("uid"))
            defaults += bool(ds.get("isDefault"))
    if defaults > 1:
        problems.append(f"{provisioning}/datasources: {defaults} default datasources")
    return problems, uids


def grafana_mounts(compose: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The grafana service's bind mounts (host path -> container path) and environment."""
    service = yaml.safe_load(compose.read_text())["services"]["grafana"]
    mounts = {}
    for volume in service.get("volumes", []):
        host, container = volume.split(":")[:2]
        mounts[str(Path(host))] = container
    return mounts, {k: str(v) for k, v in (service.get("environment") or {}).items()}


def check_dashboard_provider(provisioning: Path, compose: Path, grafana: Path) -> list[str]:
    problems = []
    mounts, env = grafana_mounts(compose)
    relative = grafana.resolve().relative_to(compose.resolve().parent)
    dashboards_in_container = mounts.get(str(relative / "dashboards"))
    if dashboards_in_container is None:
        return [f"{compose}: grafana does not mount {relative / 'dashboards'}"]
    paths = [
        (p.get("options") or {}).get("path")
        for path in sorted((provisioning / "dashboards").glob("*.y*ml"))
        for p in yaml.safe_load(path.read_text()).get("providers") or []
    ]
    if dashboards_in_container not in paths:
        problems.append(
            f"{provisioning}/dashboards: no provider reads {dashboards_in_container} "
            f"(providers read {paths})"
        )
    home = env.get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        name = home.removeprefix(dashboards_in_container.rstrip("/") + "/")
        if name == home or not (grafana / "dashboards" / name).is_file():
            problems.append(f"{compose}: the home dashboard {home} is not a mounted dashboard file")
    return problems


def dashboard_panels(dashboard: dict) -> list[dict]:
    """Panels, including those nested in rows."""
    panels = []
    for panel in dashboard.get("panels") or []:
        panels.append(panel)
        panels.extend(panel.get("panels") or [])
    return panels


def check_dashboard(path: Path, datasource_uids: set[str]) -> tuple[list[str], set[str]]:
    try:
        dashboard = json.loads(path.read_text())
    except ValueError as err:
        return [f"{path}: not JSON ({err})"], set()
    problems, ids, metrics = [], set(), set()
    for key in ("uid", "title"):
        if not dashboard.get(key):
            problems.append(f"{path}: no {key}")
    defined = {v.get("name") for v in (dashboard.get("templating") or {}).get("list") or []}
    for panel in dashboard_panels(dashboard):
        where = f"{path}: panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("id") in ids:
            problems.append(f"{where}: duplicate id")
        ids.add(panel.get("id"))
        if panel.get("type") == "row":
            continue
        if not panel.get("gridPos"):
            problems.append(f"{where}: no gridPos")
        uid = (panel.get("datasource") or {}).get("uid")
        if uid not in datasource_uids:
            problems.append(f"{where}: datasource uid {uid!r} is not provisioned")
        for target in panel.get("targets") or []:
            expr = target.get("expr")
            if not expr:
                problems.append(f"{where}: a query without expr")
                continue
            metrics |= {series_base(name) for name in METRIC.findall(expr)}
            for name in VARIABLE.findall(expr):
                if name not in defined and name not in BUILTIN_VARIABLES:
                    problems.append(f"{where}: ${name} is not a dashboard variable")
    return problems, metrics


def series_base(name: str) -> str:
    """A histogram's bucket series stands for the histogram."""
    return name.removesuffix("_bucket")


def missing_metrics(queried: set[str], seen: set[str]) -> set[str]:
    """Queried names that Prometheus has not seen, neither as such nor as a histogram's series."""
    return {
        name
        for name in queried
        if name not in seen and not any(name + suffix in seen for suffix in SERIES_SUFFIXES)
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compose", type=Path)
    parser.add_argument("--grafana", type=Path, required=True)
    parser.add_argument("--names", type=Path, help="Prometheus' __name__ values (JSON)")
    args = parser.parse_args(argv)

    provisioning = args.grafana / "provisioning"
    problems, uids = check_datasources(provisioning)
    if args.compose:
        problems += check_dashboard_provider(provisioning, args.compose, args.grafana)
    queried: set[str] = set()
    dashboards = sorted((args.grafana / "dashboards").glob("*.json"))
    if not dashboards:
        problems.append(f"{args.grafana}/dashboards: no dashboard")
    for path in dashboards:
        found, metrics = check_dashboard(path, uids)
        problems += found
        queried |= metrics
    if args.names:
        seen = set(json.loads(args.names.read_text())["data"])
        missing = missing_metrics(queried, seen)
        for name in sorted(missing - EMITTED_BY_A_SALE):
            print(f"grafana: {name} not seen by Prometheus yet (needs a fault to be counted)")
        problems += [
            f"grafana: the dashboards query {name}, which a sale emits, but Prometheus never saw it"
            for name in sorted(missing & EMITTED_BY_A_SALE)
        ]
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        what = "provisioning and dashboards" + (", queried metrics" if args.names else "")
        print(f"grafana: {what} check out ({len(dashboards)} dashboard(s), {len(queried)} metric names)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
