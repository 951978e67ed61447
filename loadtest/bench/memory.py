"""The seckill instances' memory: each one's peak resident set over the run, read from /proc
(`VmHWM`, the kernel's high-water mark of the process's RSS) just before it stops, for the
"service RSS < 64 MiB" target. The peak covers every cell the instance served, the wrk cells
included, so no sampling can miss it."""

from __future__ import annotations

import re
from pathlib import Path

_HWM = re.compile(r"^VmHWM:\s+(\d+) kB$", re.M)

# The bound on one instance's resident set.
RSS_LIMIT_MIB = 64


def peak_rss_mib(pid: int, proc: Path = Path("/proc")) -> float | None:
    """Process `pid`'s peak resident set so far, in MiB; None when it is gone or the kernel does
    not report it."""
    try:
        status = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    m = _HWM.search(status)
    return int(m.group(1)) / 1024 if m else None
