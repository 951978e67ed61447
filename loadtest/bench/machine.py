"""Provenance of a run's figures: the machine (CPU, kernel, server and tool versions, PostgreSQL
durability settings, load average) and the commit they were measured on, dirty or not."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from .processes import SetupError, first_line
from .settings import ROOT
from .stores import Pg, Redis


def machine_info(pg: Pg, redis: Redis) -> dict:
    info: dict = {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(), "kernel": platform.release(), "os": None, "cpu_model": None,
        "mem_total_kb": None, "python": platform.python_version(),
    }
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                info["os"] = line.split("=", 1)[1].strip('"')
        m = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
        info["cpu_model"] = m.group(1).strip() if m else None
        m = re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text())
        info["mem_total_kb"] = int(m.group(1)) if m else None
    except OSError:
        pass
    try:
        m = re.search(r"redis_version:(\S+)", redis.cli("INFO", "server"))
        info["redis_server"] = m.group(1) if m else None
    except SetupError:
        info["redis_server"] = None
    info["redis_benchmark"] = first_line(["redis-benchmark", "--version"])
    try:
        info["postgres_server"] = pg.value("SHOW server_version")
        info["postgres_settings"] = {k: pg.value(f"SHOW {k}") for k in ("fsync", "synchronous_commit", "shared_buffers",
                                                                       "max_connections")}
    except SetupError:
        info["postgres_server"] = None
    info["pgbench"] = first_line(["pgbench", "--version"])
    venv_k6 = ROOT / ".run/k6-venv/bin/k6"
    k6 = shutil.which("k6") or (str(venv_k6) if venv_k6.exists() else None)
    info["k6"] = first_line([k6, "version"]) if k6 else None
    info["rustc"] = first_line(["rustc", "--version"])
    info["node"] = first_line(["node", "--version"])
    info["loadavg_start"] = list(os.getloadavg())
    return info


def _git(*args: str) -> str | None:
    p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
    return p.stdout.strip() if p.returncode == 0 else None


def git_info() -> dict:
    """The commit measured, and whether the figures could come from anything else: `dirty` when
    tracked files differ from it, `untracked` lists files git does not know (and does not ignore),
    which could be code the build picked up."""
    tracked = _git("status", "--porcelain", "--untracked-files=no")
    untracked = _git("ls-files", "--others", "--exclude-standard") or ""
    return {"commit": _git("rev-parse", "HEAD"), "short": _git("rev-parse", "--short", "HEAD"),
            "branch": _git("rev-parse", "--abbrev-ref", "HEAD"), "dirty": bool(tracked),
            "untracked": untracked.splitlines()[:20]}
