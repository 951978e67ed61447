"""Small parts: k6 defaults, latency planning, lock backends from URLs, the lock section's order, result pruning, pgbench."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from bench import ceilings, cpu, locks
from bench.ceilings import pgbench_script
from bench.cli import run_ceilings_and_locks
from bench.latency import latency_specs, point_flag
from bench.locks import (HEAD_TO_HEAD_PEER, HEAD_TO_HEAD_ROUNDS, advisory_url, lockctl_line, plan_backends, replica_fields,
                         round_order, sentinel_parts)
from bench.processes import SetupError, k6_environment
from bench.result import stale_results
from bench.settings import K6_GOGC, K6_MEMORY_LIMIT_MAX, LoadModel, k6_defaults, k6_memory_limit
from factories import cell

K6_SNIPPET = """
  const replayFraction = envNum('REPLAY_FRACTION', 0.05, { min: 0, max: 1 });
    qtyMixText: envStr('QTY_MIX', '1:0.7,2:0.3'),
    perUserLimit: envNum('PER_USER_LIMIT', 2, { min: 1, integer: true }),
    maxPerOrder: envNum('MAX_PER_ORDER', 3, { min: 1, integer: true }),
    setupSale: envBool('SETUP_SALE', false),
  const invalidFraction = envNum('INVALID_FRACTION', 0.02, { min: 0, max: 1 });
"""


def test_the_load_model_is_read_from_the_k6_library():
    model = LoadModel.from_k6(k6_defaults(K6_SNIPPET))

    assert model == LoadModel(per_user_limit=2, max_per_order=3, qty_mix="1:0.7,2:0.3", replay_fraction=0.05, invalid_fraction=0.02)
    assert k6_defaults(K6_SNIPPET)["SETUP_SALE"] == "false"
    assert LoadModel.read().per_user_limit >= 1  # the real library still has the shape


def test_a_changed_k6_library_is_an_error_not_a_silent_default():
    with pytest.raises(ValueError):
        LoadModel.from_k6(k6_defaults("envNum('PER_USER_LIMIT', 2)"))


def test_quantity_weights_are_normalised():
    model = LoadModel(2, 2, "1:7, 2:3", 0.05, 0.02)

    assert model.qty_weights() == [(1, 0.7), (2, 0.3)]


def test_latency_points_offer_fractions_of_the_throughput_cell_with_vus_to_spare():
    tp = cell("db-atomic", kind="throughput", orders_per_sec=1000.0)

    specs = latency_specs(tp, (0.25, 0.5, 0.75), duration_s=10)

    assert [s.rate for s in specs] == [250, 500, 750]
    assert all(s.kind == "latency" and s.vus_limit >= s.rate and s.total == s.rate * 10 * 2 for s in specs)


def test_a_latency_point_is_valid_only_when_every_arrival_was_sent():
    assert point_flag(cell(kind="latency", fraction=0.5)) is None
    assert point_flag(cell(kind="latency", fraction=0.5, dropped_iterations=3)) == "3 arrivals dropped (open model lost)"
    assert point_flag(cell(kind="latency", fraction=0.5, p99_ms=None)) == "no accepted order"


def test_lock_backends_come_from_urls_and_unset_ones_are_not_run():
    env = {"DATABASE_URL": "postgres://seckill@127.0.0.1:5440/seckill", "ETCD_URL": "etcd://127.0.0.1:2389"}

    backends = {b.name: b for b in plan_backends(env, "redis://127.0.0.1:6390", "redlock://127.0.0.1:6401,127.0.0.1:6402", "")}

    assert list(backends) == ["redis", "sentinel", "redlock-2", "cluster", "zk", "etcd", "postgres", "postgres-advisory"]
    assert backends["sentinel"].not_run == "LOCKKIT_SENTINEL_URL unset"
    assert backends["redlock-2"].node_urls == ["redis://127.0.0.1:6401", "redis://127.0.0.1:6402"]
    assert backends["cluster"].not_run == "LOCKKIT_CLUSTER_URL unset"
    assert backends["zk"].not_run == "ZOOKEEPER_URL unset"
    assert backends["etcd"].not_run is None and backends["etcd"].url == "etcd://127.0.0.1:2389"
    assert backends["postgres-advisory"].url == "postgres+advisory://seckill@127.0.0.1:5440/seckill"


def test_a_remote_new_backend_is_not_run_but_a_remote_redis_is_an_error():
    backends = {b.name: b for b in plan_backends({"ZOOKEEPER_URL": "zk://10.0.0.1:2181/x"}, "redis://127.0.0.1:6390", "", "")}

    assert "loopback" in backends["zk"].not_run
    with pytest.raises(SetupError):
        plan_backends({}, "redis://10.0.0.1:6379", "", "")


def test_a_sentinel_url_names_the_sentinels_and_the_master_s_credentials():
    sentinels, service, scheme, userinfo = sentinel_parts(
        "redis+sentinel://u:p@127.0.0.1:6421,127.0.0.1:6422/lockkit/0?sentinel_password=s%40c")

    assert sentinels == ["redis://:s%40c@127.0.0.1:6421", "redis://:s%40c@127.0.0.1:6422"]
    assert (service, scheme, userinfo) == ("lockkit", "redis", "u:p@")
    backends = {b.name: b for b in plan_backends({}, "redis://127.0.0.1:6390", "", "",
                                                 "redis+sentinel://127.0.0.1:6421,127.0.0.1:6422/lockkit")}
    assert backends["sentinel"].kind == "sentinel" and backends["sentinel"].not_run is None
    with pytest.raises(SetupError):
        plan_backends({}, "redis://127.0.0.1:6390", "", "", "redis+sentinel://10.0.0.1:26379/lockkit")
    with pytest.raises(SetupError):
        sentinel_parts("redis+sentinel://127.0.0.1:6421")


def test_sentinel_replicas_are_read_from_redis_cli_s_lines():
    lines = ["name", "127.0.0.1:6423", "ip", "127.0.0.1", "port", "6423", "flags", "slave",
             "name", "127.0.0.1:6424", "ip", "127.0.0.1", "port", "6424", "flags", "slave"]

    assert [(r["ip"], r["port"]) for r in replica_fields(lines)] == [("127.0.0.1", "6423"), ("127.0.0.1", "6424")]
    assert replica_fields([]) == []


def test_advisory_url_keeps_the_rest_of_the_database_url():
    assert advisory_url("postgresql://u:p@127.0.0.1:5/db?x=1") == "postgres+advisory://u:p@127.0.0.1:5/db?x=1"
    assert advisory_url("mysql://x") is None


def test_lockctl_lines_measured_and_failed():
    assert lockctl_line('{"pairs_per_sec": 10.0, "p99_us": 5}\n', 0, "")["pairs_per_sec"] == 10.0
    failed = lockctl_line('{"event":"error","error":"the etcd backend is not built yet","retryable":false}\n', 1, "")
    assert failed == {"error": "the etcd backend is not built yet", "retryable": False}
    assert lockctl_line("", 101, "panicked")["error"] == "exit 101: panicked"


def test_a_run_keeps_only_its_own_timestamped_result():
    names = ["latest.json", "20261130T101010Z.json", "20261201T000000Z.json", "smoke-latest.json", "chaos-latest.json"]

    assert stale_results(names, keep="20261201T000000Z.json") == ["20261130T101010Z.json"]


def test_the_pgbench_order_uses_the_sales_limit_and_quantity_mix_as_parameters():
    script = pgbench_script(LoadModel(2, 2, "1:0.7,2:0.3", 0.05, 0.02))

    assert "\\set qty CASE WHEN :r <= 70 THEN 1 ELSE 2 END" in script
    assert ":sku::text" in script and ":limit::int" in script and "'atomic'" in script


def test_the_head_to_head_rounds_let_each_side_run_first_equally_often():
    firsts = [round_order(n)[0] for n in range(1, HEAD_TO_HEAD_ROUNDS + 1)]

    assert firsts.count("lockkit") == firsts.count(HEAD_TO_HEAD_PEER) == HEAD_TO_HEAD_ROUNDS // 2
    assert all(sorted(round_order(n)) == sorted(["lockkit", HEAD_TO_HEAD_PEER]) for n in range(1, 5))


def test_k6_runs_with_the_bench_gc_setting_unless_the_environment_sets_one(monkeypatch):
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    assert k6_environment({"RATE": "10"})["GOGC"] == K6_GOGC == "off"
    assert 0 < int(k6_environment({})["GOMEMLIMIT"]) <= K6_MEMORY_LIMIT_MAX
    assert k6_environment({"GOGC": "100"})["GOGC"] == "100"
    monkeypatch.setenv("GOGC", "400")
    monkeypatch.setenv("GOMEMLIMIT", "1GiB")
    assert k6_environment({})["GOGC"] == "400"
    assert k6_environment({})["GOMEMLIMIT"] == "1GiB"


def test_k6_may_use_a_quarter_of_the_available_memory_up_to_4_gib():
    assert k6_memory_limit("MemTotal: 4000000 kB\nMemAvailable:    2000000 kB\n") == 2_000_000 * 1024 // 4
    assert k6_memory_limit("MemAvailable: 64000000 kB\n") == K6_MEMORY_LIMIT_MAX == 4 << 30
    assert k6_memory_limit("no such line\n") == K6_MEMORY_LIMIT_MAX


def test_the_head_to_head_runs_before_the_other_lock_servers_start(monkeypatch):
    events = []
    monkeypatch.setattr(ceilings, "redis_pairs", lambda *a, **k: {"pairs_per_sec": 1.0, "redis_cpu_us_per_pair": 1.0})
    monkeypatch.setattr(ceilings, "unlink_pattern", lambda *a: 0)
    monkeypatch.setattr(locks.LockBackend, "check", lambda be: events.append(f"check {be.name}"))
    monkeypatch.setattr(locks, "head_to_head", lambda be, ms: events.append(f"head to head on {be.name}") or {"16": {}})
    monkeypatch.setattr(locks, "start_servers", lambda with_services: events.append("start lock servers"))
    monkeypatch.setattr(locks, "backend_runs", lambda be, ms: events.append(f"runs on {be.name}") or [])
    monkeypatch.setattr(locks, "PEER_LIBRARIES", [HEAD_TO_HEAD_PEER])
    monkeypatch.setattr(locks, "peers_bench", lambda be, libs, ms: ([], 0))
    backends = [locks.LockBackend("redis", "one Redis", "redis", "redis://127.0.0.1:1", "REDIS_URL"),
                locks.LockBackend("zk", "ZooKeeper", "zk", "zk://127.0.0.1:2", "ZOOKEEPER_URL")]
    plan = SimpleNamespace(cfg=SimpleNamespace(lock_ms=10, peers=True, redis_n={c: 1 for c in locks.LOCK_CONCURRENCIES},
                                               redis_n_pipelined={c: 1 for c in locks.LOCK_CONCURRENCIES}),
                           backends=backends)
    args = SimpleNamespace(only_locks=True, start_lock_servers="zookeeper")
    res = SimpleNamespace(run_id="t", ceilings={}, violations=[], lockkit={})

    run_ceilings_and_locks(plan, args, None, None, res, None)

    assert events == ["check redis", "head to head on redis", "start lock servers", "check zk", "runs on redis", "runs on zk"]
    assert res.lockkit["head_to_head"] == {"16": {}}


def test_a_pair_run_counts_the_clients_cpu_and_redis_cpu_apart():
    with cpu.PairCpu([os.getpid()]) as run:
        subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)

    fields = run.fields(1000)

    assert fields["client_cpu_us_per_pair"] > 50, "the waited-for child's CPU, per pair"
    assert fields["redis_cpu_us_per_pair"] is not None and fields["redis_cpu_us_per_pair"] < fields["client_cpu_us_per_pair"]
    assert cpu.PairCpu(None).fields(0) == {"redis_cpu_ms": None, "redis_cpu_us_per_pair": None, "client_cpu_us_per_pair": None}
