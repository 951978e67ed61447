"""The comparison runner behind `make bench` (see docs/bench.md).

Runs, in one go and against the project's own Redis and PostgreSQL (loopback only), the strategy
matrix under k6 load, the latency points at fixed offered loads, (smoke) the order lifecycle's
sale where a share of buyers never pay, the wrk cells (capacity, retry storm, hot users), the
ceilings (HTTP, pgbench, redis-benchmark, the disk's flush floor) and the lock benchmarks, and
writes loadtest/results/.

# Layout

    cli.py         the command line and the order of a run (the only module that sequences steps)
    settings.py    file locations, strategies, mode presets, the k6 library's load-model defaults
    processes.py   bounded subprocess, k6 and wrk runs, the seckill instances, HTTP and metrics access
    stores.py      PostgreSQL (psycopg, bound parameters) and Redis (redis-cli) access, counters
    cpu.py         CPU time from /proc: per process group around a cell, per Redis server
    cells.py       one cell: spec, run, result, correctness check (`check_cell`), acknowledged orders
    capacity.py    the wrk cells (capacity, retry storm, hot users, HTTP floor): specs, run, result,
                   wrk's output, CPU per order, correctness check (`check_wrk_cell`)
    latency.py     the latency points below saturation: plan and validity
    unpaid.py      the lifecycle cell of the smoke run (loadtest/k6/unpaid.js): run, result,
                   correctness check (`check_unpaid`)
    ceilings.py    HTTP ceiling, pgbench order ceiling, redis-benchmark lock pairs
    disk.py        the disk's flush floor (write + fdatasync) beside the latency points
    memory.py      each seckill instance's peak resident set over the run (VmHWM), read as it stops
    locks.py       lockkit backends from URLs, lockctl bench, peer libraries, ratios
    targets.py     PASS/MISS targets (pure)
    result.py      `RunResult`, its JSON, pruning of older timestamped result files
    publish.py     the result files and the console summary
    report_md.py   latest.md (pure)
    report_svg.py  latest.svg and latest-latency.svg (pure)
    readme.py      the READMEs' generated tables (costs and speeds; fault rows, for make chaos) and
                   the check that none is older than its results file
    machine.py     machine and git provenance
    tests/         pytest tests of the pure parts

Entry points: `python3 loadtest/bench/run.py` (what scripts/bench.sh runs) or, from `loadtest/`,
`python3 -m bench`. Exit status: 0 when every correctness check held, 1 when one was violated,
2 on a usage or set-up error. Speed targets are reported PASS/MISS and never change it.
"""
