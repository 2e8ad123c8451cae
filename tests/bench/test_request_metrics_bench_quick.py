"""Smoke test of bench/request_metrics_bench.py: `--quick` runs end to end and prints every row.

It asserts nothing about speed, only that each request kind was measured each way (every reply
2xx: the bench fails otherwise) and that the table has a figure in every cell.
"""

from __future__ import annotations

import re

import pytest

from tests.bench.quick_run import run_bench


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quick_run_prints_every_row() -> None:
    done = run_bench("request_metrics_bench.py", "--quick")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for request in ("GET /healthz", "produce, single (JSON)"):
        for way in ("no-op", "counted", "counted + access log"):
            row = re.search(rf"^\| {re.escape(request)} \| {re.escape(way)} \| ([-\d.]+) \| ([-\d.]+) \| ([\d.]+) \|$", done.stdout, re.M)
            assert row, (request, way, done.stdout)
            assert float(row.group(1)) > 0 and float(row.group(3)) > 0
