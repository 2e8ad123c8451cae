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


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quick_delivery_run_measures_every_message_on_both_servers_and_stops_them() -> None:
    """Two interleaved rounds of 60 messages each way: every message sent is measured by its consumer on both servers
    (the one socket client reads HTTP and RESP replies whole), every figure has a p50 / p99 and a server CPU."""
    done = run_bench("versus_redis.py", "--only", "delivery", "--rounds", "2", "--seconds", "0.3", "--rate", "200")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "2 interleaved rounds of 0.3 s" in log and "one socket client, bench/wire_client.py, for both" in log
    assert "messages measured: pull 120, receive 120, acked 120 of 120" in log, log[-3000:]
    for name in ("held pull / XREAD BLOCK", "held receive / XREADGROUP BLOCK", "held receive + ack / XREADGROUP + XACK"):
        row = re.search(
            rf"^\| {re.escape(name)}: [^|]+ \| ([\d.]+) / ([\d.]+) \| ([\d.]+) / ([\d.]+) \| [\d.]+ \| [\d.]+ \| ([\d.]+) / ([\d.]+) \|",
            done.stdout,
            re.M,
        )
        assert row, (name, done.stdout[-3000:])
        ours50, ours99, theirs50, theirs99, ours_cpu, theirs_cpu = (float(v) for v in row.groups())
        assert 0 < ours50 <= ours99 and 0 < theirs50 <= theirs99 and ours_cpu > 0 and theirs_cpu > 0, row.group(0)
    assert re.search(r"target delivery p99 <= 2x XREAD BLOCK's: [\d.]+x, (met|NOT met)", log), log[-2000:]
    assert re.search(r"target held receive \+ ack p50 <= 1.5 ms: [\d.]+ ms, (met|NOT met)", log), log[-2000:]
    ports = re.search(r"delivery servers on ports (\d+) \(tidemq\), (\d+) \(redis\)", log)
    assert ports, log[-2000:]
    assert processes_with([f"--port {ports.group(1)} ", f"--port {ports.group(2)} "]) == []
