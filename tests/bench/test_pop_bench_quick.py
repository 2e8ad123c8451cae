"""Smoke test of bench/pop_bench.py: `--quick` runs end to end.

It checks that every row of the table is printed with a rate, the receive + ack ratio and its goal,
that the exactly-once check passed (the bench exits 1 otherwise) and that no broker or Redis server
is left behind. It asserts nothing about speed. Skipped when redis-server or redis-py is missing (the
test never installs packages; the bench itself would).
"""

from __future__ import annotations

import re
import shutil

import pytest

from tests.bench.quick_run import processes_with, run_bench

pytest.importorskip("redis", reason="the bench extra is not installed (pip install -e '.[test,bench]')")
if shutil.which("redis-server") is None:
    pytest.skip("redis-server is not installed", allow_module_level=True)

ROWS = (
    "tidemq offset pull (JSON) + commit, 8 consumers, before",
    "tidemq offset pull (JSON) + commit, after",
    "tidemq offset pull, baseline",
    "tidemq receive + ack, 8 consumers",
    "redis XREADGROUP + XACK, 8 consumers",
)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quick_run_prints_every_row_and_acks_each_message_once() -> None:
    done = run_bench("pop_bench.py", "--quick", "--seconds", "1")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    table = {
        cells[0]: cells
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in done.stdout.splitlines() if line.startswith("| "))
    }
    for name in ROWS:
        cells = next((cells for label, cells in table.items() if label.startswith(name)), None)
        assert cells is not None, f"no row {name!r}:\n{log[-3000:]}"
        rate, us_per_message, ratio, errors = cells[1], cells[2], cells[5], cells[7]
        assert float(rate.replace(",", "")) > 0 and float(us_per_message) > 0 and float(ratio) > 0, cells
        assert errors == "0", cells
    pop = next(cells for label, cells in table.items() if label.startswith("tidemq receive + ack"))
    assert re.fullmatch(r">= 0\.5: (met|NOT met)", pop[6]), pop
    assert re.search(r"Exactly once: receive \+ ack acked 8,000 distinct msg_ids in 8,000 acks, of 8,000 pre-filled; redis 8,000 ", log), (
        log[-2000:]
    )
    assert "SQS" in log and "XAUTOCLAIM" in log
    ports = re.findall(r"--port (\d+)", log)
    assert ports, log[-2000:]
    leftovers = processes_with([*(f"--port {port}" for port in ports), "tidemq-pop-bench-"])
    assert leftovers == [], leftovers
