"""The disk's flush floor: how long one durable write of the size of a small WAL flush takes on
the filesystem that holds PostgreSQL's data, while the servers are idle.

Every acknowledged order waits for PostgreSQL's WAL flush (`fdatasync`). A flush that stalls
stalls every batch in flight on every instance at once, and every order that arrives meanwhile.
On the development box's virtual disk, single flushes of 8 KB took 40 to 200 ms, a few times in
30 s, with nothing else running; under load PostgreSQL's sampled wait events showed one WAL flush
(`IO:WALSync`) of about 250 ms at the moment a latency point's slow orders clustered. A stall of
100 ms in a 10 s latency point is 1% of its requests, the whole p99. So the run measures the
floor beside the latency points, and their target's detail quotes it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# A flush longer than this is a stall: several times an order's p50 at moderate load.
STALL_MS = 30.0
# The size of one write, a WAL page: an order's batch writes about 1.2 KB of WAL per order.
WRITE_BYTES = 8192
# The probe's file, reused in a ring so that no flush allocates blocks (as a recycled WAL segment).
FILE_BYTES = 16 << 20
# The pause between flushes: a committing batcher's pace, not a benchmark of the device.
PAUSE_S = 0.002


def percentile(sorted_ms: list[float], q: float) -> float:
    """The `q` quantile (0..1) of an ascending list, nearest rank."""
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def flush_floor(directory: Path, seconds: float) -> dict:
    """Writes 8 KB and `fdatasync`s it, in a loop for `seconds`, in a file under `directory` (the
    run directory, on the filesystem of the project's PostgreSQL data; removed afterwards): the
    latency of each flush, its p50/p99/p99.9/max, and the stalls (over `STALL_MS`) with the time
    they took in all."""
    path = directory / "disk-flush-probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"\0" * FILE_BYTES)
        os.fsync(fd)
        page, offset, flushes = b"x" * WRITE_BYTES, 0, []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            os.pwrite(fd, page, offset)
            offset = (offset + WRITE_BYTES) % FILE_BYTES
            started = time.perf_counter()
            os.fdatasync(fd)
            flushes.append((time.perf_counter() - started) * 1000)
            time.sleep(PAUSE_S)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    stalls = [ms for ms in flushes if ms > STALL_MS]
    ordered = sorted(flushes)
    return {"seconds": seconds, "write_bytes": WRITE_BYTES, "flushes": len(flushes),
            "p50_ms": round(percentile(ordered, 0.5), 2), "p99_ms": round(percentile(ordered, 0.99), 2),
            "p999_ms": round(percentile(ordered, 0.999), 2), "max_ms": round(ordered[-1], 2),
            "stall_ms": STALL_MS, "stalls": len(stalls), "stalled_ms": round(sum(stalls), 1)}


def describe(floor: dict) -> str:
    """One line for the report and the latency target: the flushes' percentiles and stalls."""
    return (f"{floor['flushes']} flushes of {floor['write_bytes'] // 1024} KB (write + fdatasync) in "
            f"{floor['seconds']:g} s with the servers idle: p50 {floor['p50_ms']} ms, p99 {floor['p99_ms']} ms, "
            f"p99.9 {floor['p999_ms']} ms, max {floor['max_ms']} ms; {floor['stalls']} over {floor['stall_ms']:g} ms, "
            f"{floor['stalled_ms']} ms in all")
