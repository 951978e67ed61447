"""Where the CPU went: utime + stime from /proc, per process group around a cell (the CPU
profile, and the wrk cells' CPU per order) and per Redis server around a lock run (Redis CPU per
pair)."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")

# Where a cell's CPU goes: processes by name. Everything else on the box is "other".
# (k6 itself is counted through this runner's children times: it has exited by the second sample.)
PROFILE_GROUPS = {"seckill": "seckill", "postgres": "postgres", "redis": "redis-server", "k6": "k6"}

# Groups narrowed to given pids (see `pin`): the other processes of that name count as "other".
_PINNED: dict[str, frozenset[int]] = {}


def pin(group: str, pids: list[int]) -> None:
    """Counts only `pids` in `group` from now on. The service's Redis is one redis-server among
    several when lockkit's servers (Redlock, Cluster, Sentinel) run on the same box: their idle
    housekeeping is not the service's cost (14 idle servers used 2.6% of a core, 14 µs per order
    at 1900 orders/s)."""
    _PINNED[group] = frozenset(pids)


def _counts(group: str, name: str, pid: int, comm: str) -> bool:
    pinned = _PINNED.get(group)
    return comm == name and (pinned is None or pid in pinned)


def _stat_ticks(stat: str) -> int:
    fields = stat.rpartition(")")[2].split()  # fields[0] is field 3 (state) of proc(5)
    return int(fields[11]) + int(fields[12])  # fields 14 utime, 15 stime


def cpu_ticks(pids: list[int]) -> int | None:
    """utime + stime (clock ticks, every thread) summed over the processes; None if one is gone."""
    total = 0
    for pid in pids:
        try:
            total += _stat_ticks(Path(f"/proc/{pid}/stat").read_text())
        except OSError:
            return None
    return total


class PairCpu:
    """The CPU time around one run of lock pairs: `with PairCpu(pids) as cpu: ...`, then
    cpu.fields(pairs). Redis's: utime + stime of the servers `pids` (/proc). The client's: the
    run's waited-for child processes (`children_cpu_s`): the benchmark process, which runs the
    library under test and its harness loop (with a peer, through loadtest/peers/run.sh: a bash
    and a `timeout` more, a few milliseconds per run)."""

    def __init__(self, pids: list[int] | None):
        self.pids = list(pids or [])
        self.before: int | None = None
        self.after: int | None = None
        self.client_before = 0.0
        self.client_after = 0.0

    def __enter__(self) -> "PairCpu":
        self.before = cpu_ticks(self.pids) if self.pids else None
        self.client_before = children_cpu_s()
        return self

    def __exit__(self, *exc) -> bool:
        self.after = cpu_ticks(self.pids) if self.pids else None
        self.client_after = children_cpu_s()
        return False

    @property
    def cpu_us(self) -> float | None:
        """Redis's CPU µs over the run."""
        if self.before is None or self.after is None:
            return None
        return (self.after - self.before) * 1e6 / CLK_TCK

    def fields(self, pairs) -> dict:
        us, client_us = self.cpu_us, (self.client_after - self.client_before) * 1e6
        try:
            n = float(pairs)
        except (TypeError, ValueError):
            n = 0.0
        return {"redis_cpu_ms": None if us is None else round(us / 1000, 1),
                "redis_cpu_us_per_pair": round(us / n, 2) if us is not None and n > 0 else None,
                "client_cpu_us_per_pair": round(client_us / n, 2) if n > 0 else None}


def process_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (comm, utime + stime in clock ticks) of every process, and pid 0 -> ("total", the
    machine's busy ticks over all CPUs from /proc/stat)."""
    out: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        out[int(entry.name)] = (stat[stat.find("(") + 1:stat.rfind(")")], _stat_ticks(stat))
    try:
        cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        busy = sum(int(x) for x in cpu) - int(cpu[3]) - int(cpu[4])  # minus idle and iowait
        out[0] = ("total", busy)
    except (OSError, IndexError, ValueError):
        pass
    return out


def children_cpu_s() -> float:
    """CPU seconds of this process's waited-for children so far (k6 and its wrapper, wrk)."""
    t = os.times()
    return t.children_user + t.children_system


def group_cpu_s(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]]) -> dict[str, float]:
    """CPU seconds each process group used between two `process_ticks` samples (a process that
    started in between counts from zero; one that ended is missed), and under "busy" the whole
    machine's (when both samples have it)."""
    used: dict[str, float] = {g: 0.0 for g in PROFILE_GROUPS}
    for pid, (comm, ticks) in after.items():
        if pid == 0:
            continue
        earlier = before.get(pid)
        delta = ticks - (earlier[1] if earlier and earlier[0] == comm else 0)
        for group, name in PROFILE_GROUPS.items():
            if _counts(group, name, pid, comm):
                used[group] += delta
    out = {g: t / CLK_TCK for g, t in used.items()}
    if 0 in before and 0 in after:
        out["busy"] = (after[0][1] - before[0][1]) / CLK_TCK
    return out


def cpu_profile(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], wall_s: float,
                k6_cpu_s: float) -> dict:
    """CPU used by each process group between two samples, in % of one core (see `group_cpu_s`;
    k6 has ended by the second sample: its CPU time is `k6_cpu_s`, what this runner's waited-for
    children used)."""
    if wall_s <= 0:
        return {}
    used = group_cpu_s(before, after)
    busy = used.pop("busy", None)
    used["k6"] += k6_cpu_s
    pct: dict = {g: round(s / wall_s * 100, 1) for g, s in used.items()}
    if busy is not None:
        total = busy / wall_s * 100
        pct["other"] = round(max(total - sum(pct.values()), 0.0), 1)
        pct["busy"] = round(total, 1)
    pct["cores"] = os.cpu_count() or 0
    return pct
