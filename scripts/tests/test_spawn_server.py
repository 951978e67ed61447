"""scripts/lib/proc.sh's spawn_server: one server per directory. A second start from the same
directory on another port must fail and leave the first server and its pid file alone (it used
to overwrite the pid file, so that `services.sh down` left the first server running, untracked).
The toy server is Python's http.server; everything it starts is stopped by pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(directory: Path, port: int) -> subprocess.CompletedProcess:
    """spawn_server for a toy http.server named `toy` in `directory` on `port`."""
    script = (f'SCRIPT_TAG=test; source "{ROOT}/scripts/lib.sh"; '
              f'spawn_server "{directory}" toy {port} python3 port_open python3 -m http.server {port} --bind 127.0.0.1')
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=90)


def pids_of(ports: list[int]) -> list[int]:
    """The toy servers serving `ports`, found by their command lines."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"http.server" in args and any(str(p).encode() in args for p in ports):
            found.append(int(entry.name))
    return found


def test_a_second_server_from_the_same_directory_is_refused(tmp_path):
    first, second = free_port(), free_port()
    try:
        started = spawn(tmp_path, first)
        assert started.returncode == 0, started.stderr
        pid_file = tmp_path / "toy.pid"
        recorded = pid_file.read_text()

        again = spawn(tmp_path, second)

        assert again.returncode != 0, "a second server from the same directory was started"
        assert "already running" in again.stderr and f"127.0.0.1:{first}" in again.stderr, again.stderr
        assert pid_file.read_text() == recorded, "the first server's pid file was overwritten"
        assert pids_of([second]) == [], "a server was started on the second port"
        assert spawn(tmp_path, first).returncode == 0, "the first server is still the one this directory runs"
    finally:
        for pid in pids_of([first, second]):
            os.kill(pid, signal.SIGTERM)
        time.sleep(0.2)
