"""The processes a run starts and talks to: bounded subprocess runs, k6 runs, load generators
run side by side (wrk, one per instance), servers started the project's one way (`server`:
scripts/server.sh KIND run, so the child is the server), the seckill instances (`Instance`, their
address read from the file the instance writes, stopped by their own pid), and HTTP/Prometheus
access to them. The demo (loadtest/demo/run.py) starts its processes with these too.

Nothing here measures anything by itself; the cells, ceilings and lock benchmarks do.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .settings import K6_GOGC, K6_WRAPPER, ROOT, SECKILL_BIN, SERVER_SCRIPT, k6_memory_limit

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class SetupError(Exception):
    """The bench cannot run (missing binary, service not starting...)."""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def rel(path: Path) -> str:
    """`path` relative to the repository when it is inside it (for the reports)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def run(cmd, *, timeout: float, env=None, check=False, cwd=None) -> subprocess.CompletedProcess:
    """Runs a command to completion with a hard timeout; output captured as text."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise SetupError(f"timed out after {timeout:.0f}s: {' '.join(map(str, cmd))}") from e
    if check and proc.returncode != 0:
        raise SetupError(f"exit {proc.returncode}: {' '.join(map(str, cmd))}\n{proc.stderr[-2000:]}")
    return proc


def first_line(cmd, timeout: float = 20) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def run_k6(script: Path, env: dict[str, str], log_path: Path, timeout: float, console_path: Path | None = None) -> int:
    """One k6 run through scripts/k6.sh, its output in `log_path` (console.log lines in
    `console_path` when given); returns k6's exit status (-1 when it had to be stopped).
    Interrupted or timed out, it stops k6 by its own pid: never leaves it behind."""
    cmd = ["bash", str(K6_WRAPPER), "-q", "--no-color"]
    if console_path is not None:
        cmd += ["--console-output", str(console_path)]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen([*cmd, str(script)], env=k6_environment(env), cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        return wait_or_stop([proc], timeout, f"k6 {script.name}")[0]


def k6_environment(env: dict[str, str]) -> dict[str, str]:
    """The environment of a k6 run: this process's, `env`, and k6's GC setting (`K6_GOGC`, under the
    soft limit `k6_memory_limit`) for whichever of GOGC and GOMEMLIMIT those do not set."""
    return {"GOGC": K6_GOGC, "GOMEMLIMIT": str(k6_memory_limit()), **os.environ, **env}


def run_together(cmds: list[list[str]], log_paths: list[Path], timeout: float, what: str) -> list[int]:
    """Starts every command at once (each one's output in its log), waits for all of them, and
    returns their exit statuses (-1 for one that had to be stopped). Bounded like `run_k6`: past
    `timeout` (from the start) or when interrupted, each is stopped by its own pid."""
    procs: list[subprocess.Popen] = []
    outs = [open(path, "wb") for path in log_paths]
    try:
        for cmd, out in zip(cmds, outs, strict=True):
            procs.append(subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        return wait_or_stop(procs, timeout, what)
    except BaseException:  # e.g. the second could not start: the first must not outlive the run
        _kill(procs)
        raise
    finally:
        for out in outs:
            out.close()


def wait_or_stop(procs: list[subprocess.Popen], timeout: float, what: str) -> list[int]:
    """Waits for the processes until `timeout` seconds from now; one still running then gets
    SIGTERM, SIGKILL 20 s later, by its own pid (-1 when it exited 0 anyway). Interrupted, it kills
    them before re-raising: nothing is left behind."""
    deadline = time.monotonic() + timeout
    codes = []
    try:
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=max(deadline - time.monotonic(), 0.1)))
            except subprocess.TimeoutExpired:
                log(f"{what} exceeded {timeout:.0f}s; stopping it (pid {proc.pid})")
                proc.send_signal(signal.SIGTERM)
                try:
                    rc = proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    rc = proc.wait()
                codes.append(rc if rc else -1)
    except BaseException:
        _kill(procs)
        raise
    return codes


def _kill(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def k6_metric(summary: dict, name: str, stat: str, default=0):
    m = summary.get("metrics", {}).get(name)
    if not m:
        return default
    return m.get("values", {}).get(stat, default)


def http_json(method: str, url: str, body=None, headers=None, timeout: float = 10.0):
    """(status, parsed JSON or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            status, raw = res.status, res.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


class Process:
    """A child process in its own session, its output in `log_path`; signalled and stopped by its
    own pid, never by name."""

    def __init__(self, argv: list[str], log_path: Path, env: dict | None = None, stdin=subprocess.DEVNULL):
        self.log_path = log_path
        with open(log_path, "wb") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdin=stdin, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def stop(self, grace: float = 15) -> int | None:
        """SIGCONT (a frozen process cannot act on SIGTERM), SIGTERM, SIGKILL `grace` s later."""
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                log(f"{self.log_path.stem} (pid {self.proc.pid}) ignored SIGTERM for {grace:.0f} s; SIGKILL")
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def server(kind: str, run_dir: Path, *args: str, name: str | None = None, env: dict | None = None,
           stdin=subprocess.DEVNULL) -> Process:
    """`scripts/server.sh KIND run RUN_DIR ARG...`, the project's one way to start a server: `run`
    execs it, so the process is the server itself. Its log is RUN_DIR/NAME.log (NAME defaults to
    KIND), where the server's own output goes too."""
    return Process(["bash", str(SERVER_SCRIPT), kind, "run", str(run_dir), *args],
                   run_dir / f"{name or kind}.log", env, stdin)


def read_address(file: Path, process: Process, what: str, timeout: float = 60) -> str:
    """The `host:port` a server wrote to `file` once it listened (written atomically)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if file.exists():
            return file.read_text().strip()
        if not process.alive():
            raise SetupError(f"{what} exited with {process.proc.returncode}; see {process.log_path}")
        time.sleep(0.05)
    raise SetupError(f"{what} did not start listening within {timeout:.0f}s; see {process.log_path}")


class Instance:
    """One seckill process `seckill-NAME` in `run_dir`, listening on 127.0.0.1:`port` (0: a free
    port), started through `server`; its address read from the file it writes once listening."""

    def __init__(self, name: str, run_dir: Path, env: dict, port: int = 0):
        self.name = name
        label = f"seckill-{name}"
        self.address_file = run_dir / f"{label}.addr"
        self.address_file.unlink(missing_ok=True)
        self.process = server("seckill", run_dir, label, name=label,
                              env={**env, "SECKILL_BIN": str(SECKILL_BIN), "SECKILL_LISTEN": f"127.0.0.1:{port}"})
        self.log_path = self.process.log_path
        self.address: str | None = None
        log(f"{label} started, pid {self.process.pid}, log {rel(self.log_path)}")

    @property
    def base(self) -> str:
        return f"http://{self.address}"

    def log_text(self) -> str:
        try:
            return ANSI.sub("", self.log_path.read_text(errors="replace"))
        except OSError:
            return ""

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as fh:
            fh.seek(offset)
            return ANSI.sub("", fh.read().decode(errors="replace"))

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        self.address = read_address(self.address_file, self.process, f"seckill {self.name}", timeout)
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise SetupError(f"seckill {self.name} exited with {self.process.proc.returncode}; "
                                 f"see {self.log_path}\n{self.log_text()[-1500:]}")
            try:
                if http_json("GET", f"{self.base}/readyz", timeout=2)[0] == 200:
                    log(f"seckill {self.name} ready on {self.base}")
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SetupError(f"seckill {self.name} not ready within {timeout:.0f}s; see {self.log_path}")

    def stop(self) -> int | None:
        return self.process.stop()


def log_findings(text: str, limit: int = 8) -> dict:
    """WARN/ERROR lines of a seckill log (tracing's text format)."""
    warn = [line for line in text.splitlines() if re.search(r"\s(WARN|ERROR)\s", line)]
    return {
        "warn": sum(1 for line in warn if " WARN " in line),
        "error": sum(1 for line in warn if " ERROR " in line),
        "samples": [line[:400] for line in warn[:limit]],
    }


def scrape_metrics(instances: list[Instance]) -> dict[str, float]:
    """Sum over the instances of every Prometheus series (counters, histogram sums and counts)."""
    total: dict[str, float] = {}
    for inst in instances:
        try:
            with urllib.request.urlopen(f"{inst.base}/metrics", timeout=10) as r:
                text = r.read().decode(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if not line or line.startswith("#") or "_bucket{" in line:
                continue
            series, _, value = line.rpartition(" ")
            try:
                total[series] = total.get(series, 0.0) + float(value)
            except ValueError:
                pass
    return total


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict:
    """What the services did during one cell: lock and order figures from their own metrics."""
    def d(series):
        return after.get(series, 0.0) - before.get(series, 0.0)

    def avg_ms(prefix, label=""):
        n = d(f"{prefix}_count{label}")
        return round(d(f"{prefix}_sum{label}") / n * 1000, 2) if n > 0 else None

    return {
        "lock_acquired": int(d('lockkit_acquire_attempts_total{outcome="acquired"}')),
        "lock_attempts_held": int(d('lockkit_acquire_attempts_total{outcome="held"}')),
        "lock_wait_ms_avg": avg_ms("lockkit_acquire_wait_seconds", '{outcome="acquired"}'),
        "lock_wait_timeouts": int(d('lockkit_acquire_wait_seconds_count{outcome="timeout"}')),
        "lock_hold_ms_avg": avg_ms("lockkit_hold_seconds"),
        "orders_accepted": int(d('seckill_orders_total{outcome="accepted"}')),
        "orders_busy": int(d('seckill_orders_total{outcome="busy"}')),
        "order_ms_avg_accepted": avg_ms("seckill_order_duration_seconds", '{outcome="accepted"}'),
        "order_ms_avg_sold_out": avg_ms("seckill_order_duration_seconds", '{outcome="sold_out"}'),
    }
