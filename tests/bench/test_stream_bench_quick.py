"""Smoke test of bench/stream_bench.py: a short run of both modes ends with every table row printed
and no broker left behind. It asserts nothing about speed or memory."""

from __future__ import annotations

import re

import pytest

from tests.bench.quick_run import processes_with, run_bench


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_short_run_prints_every_row() -> None:
    done = run_bench("stream_bench.py", "--streams", "0", "20", "--produces", "60", "--minutes", "0.2", "--rate", "20")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in done.stdout.splitlines()
        if re.match(r"\| ([0-9]|baseline |stream )", line)
    ]
    latency = {(r[0], r[1]): r for r in rows if len(r) == 10}
    assert set(latency) == {("0", "none"), ("20", "idle"), ("20", "consuming")}, rows
    assert latency[("20", "idle")][9] == "0" and int(latency[("20", "consuming")][9].replace(",", "")) >= 60, latency
    rss = {r[0]: r for r in rows if len(r) == 7}
    assert set(rss) == {"baseline", "stream"} and rss["baseline"][4] == "0" and rss["stream"][4] != "0", rss
    assert processes_with(["tidemq-streams-", "tidemq-rss-"]) == []
