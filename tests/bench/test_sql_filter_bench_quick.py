"""Smoke test of bench/sql_filter_bench.py: a small run goes end to end, prints every row with a rate,
CPU and ratio, checks its sweeps (the bench asserts every round examines and returns the same), and
leaves no broker behind. It asserts nothing about speed."""

from __future__ import annotations

import pytest

from tests.bench.quick_run import processes_with, run_bench

ROWS = (
    "no filter (baseline)",
    "sql amount >= 0 (every message passes)",
    "sql region = 'eu' AND amount > 500",
    "sql, larger (6 conditions)",
    "tag paid (hash, then exact tag)",
    "no filter + Python evaluator per message",
    "JSON, no filter (baseline)",
    "JSON, sql amount >= 0",
    "batch format, sql amount >= 0",
)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_small_run_prints_every_row() -> None:
    done = run_bench("sql_filter_bench.py", "--messages", "3000", "--rounds", "1")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in done.stdout.splitlines())}
    for name in ROWS:
        cells = rows[name]
        assert float(cells[1].replace(",", "")) > 0 and float(cells[2]) > 0 and float(cells[4]) > 0, cells
    passing = sum(1 for i in range(3000) if i % 3 == 0 and i % 1000 > 500)  # region eu, amount > 500 (the bench's fill)
    assert rows["sql region = 'eu' AND amount > 500"][3] == f"{passing:,}"
    assert done.stdout.count("(met)") + done.stdout.count("(NOT met)") == 3
    assert processes_with(["tidemq-sql-bench-"]) == []
