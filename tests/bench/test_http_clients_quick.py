"""Smoke test of bench/http_clients_bench.py --quick: every installed candidate sends its produces
to a real broker and gets a row in the table. It asserts nothing about speed."""

from __future__ import annotations

import pytest

from tests.bench.quick_run import run_bench


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_quick_run_measures_every_installed_client() -> None:
    done = run_bench("http_clients_bench.py", "--quick", timeout_s=180)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| client")]
    measured = {row.split("|")[1].strip() for row in rows if "skipped" not in row}
    assert {"httpx", "tidemq.AsyncClient (asyncio + httptools)", "tidemq.Client (8 threads, sockets + httptools)"} <= measured, done.stdout
    for row in rows:
        if "skipped" not in row:
            assert float(row.split("|")[2].replace(",", "")) > 0, row
