"""The peak resident set read from /proc (memory.py), on real processes."""

import os
import subprocess
import sys

from bench.memory import peak_rss_mib


def test_the_peak_rss_of_a_live_process_covers_what_it_touched_and_stays_after_it_freed_it():
    # A child touches 48 MiB, frees it and waits: its high-water mark keeps the 48 MiB.
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(48 << 20); del b; print(flush=True); input()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()
        assert peak_rss_mib(child.pid) >= 48
    finally:
        child.communicate("\n", timeout=10)


def test_a_process_that_is_gone_has_no_peak():
    child = subprocess.Popen(["true"])
    child.wait()

    assert peak_rss_mib(child.pid) is None
    assert peak_rss_mib(os.getpid()) > 0
