"""Smoke test of the batch section of bench/versus_redis.py: `--only batch --quick` runs end to end.

It checks that both servers are started, every row of the batch table has a tidemq and a Redis
figure, the ratios and targets are printed, and no server is left behind. It asserts nothing
about speed. Skipped when redis-server, redis-benchmark or wrk is missing (the test never
installs packages; the bench itself would).
"""

from __future__ import annotations

import re
import shutil

import pytest

from tests.bench.quick_run import processes_with, run_bench

pytest.importorskip("redis", reason="the bench extra is not installed (pip install -e '.[test,bench]')")
for _binary in ("redis-server", "redis-benchmark", "wrk"):
    if shutil.which(_binary) is None:
        pytest.skip(f"{_binary} is not installed", allow_module_level=True)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quick_batch_run_prints_every_row_and_stops_its_servers() -> None:
    done = run_bench("versus_redis.py", "--only", "batch", "--quick", "--py-clients", "2", "--seconds", "1")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "ASYNC_FLUSH" in log and "appendonly no" in log
    rows = [line for line in done.stdout.splitlines() if line.startswith("| binary batch") or line.startswith("| Python")]
    assert len(rows) == 3, log[-3000:]
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        tidemq, redis, ratio, target = cells[1:5]
        assert float(tidemq.replace(",", "")) > 0 and float(redis.replace(",", "")) > 0, row
        assert float(ratio) > 0 and re.match(r">= [13]\.0: (met|NOT met)", target), row
    ports = re.findall(r"redis-benchmark -p (\d+)", log) + re.findall(r"http://127\.0\.0\.1:(\d+)", log)
    assert len(ports) == 2, log[-3000:]
    leftovers = processes_with(f"--port {port}" for port in ports)
    assert leftovers == [], leftovers
