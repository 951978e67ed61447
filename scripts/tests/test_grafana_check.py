"""scripts/grafana_check.py: the demo stack's Grafana files pass, and each check fails on the
one mistake it is there for (a control per check), on a copy of the real files."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("grafana_check", ROOT / "scripts" / "grafana_check.py")
grafana_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grafana_check)


@pytest.fixture
def stack(tmp_path: Path) -> Path:
    """A copy of docker-compose.yml and deploy/grafana, laid out as in the repository."""
    shutil.copy(ROOT / "docker-compose.yml", tmp_path / "docker-compose.yml")
    shutil.copytree(ROOT / "deploy" / "grafana", tmp_path / "deploy" / "grafana")
    return tmp_path


def run(stack: Path, *extra: str) -> int:
    return grafana_check.main(
        ["--compose", str(stack / "docker-compose.yml"), "--grafana", str(stack / "deploy" / "grafana"), *extra]
    )


def edit_dashboard(stack: Path, change) -> None:
    path = stack / "deploy" / "grafana" / "dashboards" / "seckill.json"
    dashboard = json.loads(path.read_text())
    change(dashboard)
    path.write_text(json.dumps(dashboard))


def test_the_repository_files_pass(stack: Path) -> None:
    assert run(stack) == 0


def test_a_panel_on_an_unprovisioned_datasource_fails(stack: Path, capsys) -> None:
    edit_dashboard(stack, lambda d: d["panels"][0]["datasource"].update(uid="nowhere"))
    assert run(stack) == 1
    assert "datasource uid 'nowhere' is not provisioned" in capsys.readouterr().err


def test_an_undefined_variable_fails(stack: Path, capsys) -> None:
    def use_unknown(d):
        d["panels"][0]["targets"][0]["expr"] += ' + on() vector($shard)'

    edit_dashboard(stack, use_unknown)
    assert run(stack) == 1
    assert "$shard is not a dashboard variable" in capsys.readouterr().err


def test_a_dashboard_that_is_not_json_fails(stack: Path, capsys) -> None:
    (stack / "deploy" / "grafana" / "dashboards" / "seckill.json").write_text("{ not json")
    assert run(stack) == 1
    assert "not JSON" in capsys.readouterr().err


def test_a_provider_reading_another_folder_fails(stack: Path, capsys) -> None:
    path = stack / "deploy" / "grafana" / "provisioning" / "dashboards" / "dashboards.yml"
    path.write_text(path.read_text().replace("path: /etc/grafana/dashboards", "path: /var/dashboards"))
    assert run(stack) == 1
    assert "no provider reads /etc/grafana/dashboards" in capsys.readouterr().err


def test_a_home_dashboard_that_is_not_mounted_fails(stack: Path, capsys) -> None:
    path = stack / "docker-compose.yml"
    path.write_text(path.read_text().replace("dashboards/seckill.json", "dashboards/other.json"))
    assert run(stack) == 1
    assert "home dashboard" in capsys.readouterr().err


def names_file(stack: Path, names: set[str]) -> str:
    path = stack / "names.json"
    path.write_text(json.dumps({"status": "success", "data": sorted(names)}))
    return str(path)


def test_metrics_a_sale_emits_must_have_been_seen(stack: Path, capsys) -> None:
    seen = {
        "up",
        "seckill_orders_total",
        "lockkit_acquire_attempts_total",
        "seckill_order_duration_seconds_bucket",
        "seckill_order_duration_seconds_count",
    }
    assert run(stack, "--names", names_file(stack, seen)) == 0
    assert "lockkit_leases_lost_total not seen" in capsys.readouterr().out

    seen.discard("seckill_orders_total")
    assert run(stack, "--names", names_file(stack, seen)) == 1
    assert "seckill_orders_total, which a sale emits" in capsys.readouterr().err


def test_a_summary_counts_as_its_histogram() -> None:
    queried = {"seckill_order_duration_seconds", "lockkit_hold_seconds"}
    assert grafana_check.missing_metrics(queried, {"seckill_order_duration_seconds", "lockkit_hold_seconds_sum"}) == set()
    assert grafana_check.missing_metrics(queried, {"lockkit_hold_seconds_sum"}) == {"seckill_order_duration_seconds"}
