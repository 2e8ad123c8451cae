"""Smoke test of bench/versus_redis.py: one quick round of its requests section runs end to end.

It checks that the no-op server, tidemq and Redis were all driven by the one load generator
(bench/loadgen.c, built here), that every row has a rate and a server CPU per request, that the
target line is printed, and that no server is left behind. It asserts nothing about speed.
Skipped when redis-server or a C compiler is missing (the test never installs packages).
"""

from __future__ import annotations

import re
import shutil

import pytest

from tests.bench.quick_run import processes_with, run_bench

pytest.importorskip("redis", reason="the bench extra is not installed (pip install -e '.[test,bench]')")
for _binary in ("redis-server", "cc"):
    if shutil.which(_binary) is None:
        pytest.skip(f"{_binary} is not installed", allow_module_level=True)

ROWS = (
    "plain-ASGI no-op GET",
    "tidemq GET /healthz",
    "tidemq single JSON produce, 1 KiB",
    "tidemq JSON batch 100 x 1 KiB",
    "tidemq binary batch 100 x 1 KiB",
    "redis XADD 1 KiB",
    "redis XADD 1 KiB, 100 pipelined",
)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quick_requests_run_prints_every_row_and_stops_its_servers() -> None:
    done = run_bench("versus_redis.py", "--only", "requests", "--quick", "--rounds", "1", "--seconds", "1", "--connections", "4")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "bench/loadgen.c with 4 connections for every row" in log
    for name in ROWS:
        row = re.search(
            rf"^\| {re.escape(name)} \| ([\d,]+) \| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \| .* \| (\d+) \| ([\d.]+) \|", done.stdout, re.M
        )
        assert row, (name, done.stdout[-3000:])
        rate, _, cpu_per_request, _, errors, _ = row.groups()
        assert float(rate.replace(",", "")) > 0 and float(cpu_per_request) > 0 and errors == "0", row.group(0)
    assert re.search(r"target single JSON produce <= 2x the no-op's CPU per request: [\d.]+x, (met|NOT met)", log), log[-2000:]
    ports = re.search(r"servers on ports (\d+), (\d+), (\d+)", log)
    assert ports, log[-2000:]
    noop, tidemq, redis = ports.groups()
    assert processes_with([f"noop_asgi.py {noop}", f"--port {tidemq} ", f"--port {redis} "]) == []
