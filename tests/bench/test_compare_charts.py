"""The comparison's charts read alone: units and direction on every axis, numbers on bars, a legend
on every panel, log scales where values span orders of magnitude, the machine, date and load in a
caption, and the achieved send rates in the latency title."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

pytest.importorskip("matplotlib", reason="the bench extra is not installed (pip install -e '.[test,bench]')")

from bench.compare_charts import latency_figure, throughput_figure, write_charts  # noqa: E402

SYSTEMS = {
    "tidemq (ASYNC_FLUSH)": {"system": "tidemq", "role": "fast"},
    "nats (JetStream file)": {"system": "nats", "role": "fast"},
    "redis (appendfsync everysec)": {"system": "redis", "role": "fast"},
    "tidemq (SYNC_FLUSH)": {"system": "tidemq", "role": "durable"},
    "redis (appendfsync always)": {"system": "redis", "role": "durable"},
}
META: dict[str, Any] = {
    "date": "2026-11-22 03:26 UTC",
    "machine": {"host": "vm", "cpu": "Xeon", "cores": 2, "memory_gib": 23.5, "load_start": "4.44 / 4.69 / 5.06", "load_end": "3.19 / 4.19 / 4.83"},
    "plan": {"name": "full", "sizes": [128, 1024], "batch": 100, "catch_up_size": 128, "durable_size": 1024, "durable_count": {1: 10, 64: 10},
             "concurrency": 8, "latency_rate_per_s": 1000, "latency_size": 1024},
}  # fmt: skip


def rows() -> dict[str, list[dict[str, Any]]]:
    produce = []
    for size, (single, batch) in {128: ((195, 7398, 5257), (9275, 11092, 26648)), 1024: ((347, 6169, 6366), (10482, 13303, 18147))}.items():
        for mode, figures in (("single", single), ("batch100", batch)):
            produce += [
                {"system": s, "size": size, "mode": mode, "per_s": v} for s, v in zip(("tidemq", "nats", "redis"), figures, strict=True)
            ]
    latency = [
        {"system": "tidemq", "label": "tidemq (ASYNC_FLUSH)", "samples_us": [10_000.0 + i for i in range(100)], "achieved_per_s": 155.0, "p99_us": 10_099.0},
        {"system": "redis", "label": "redis (appendfsync everysec)", "samples_us": [300.0 + i for i in range(100)], "achieved_per_s": 1000.0, "p99_us": 399.0},
    ]  # fmt: skip
    return {
        "produce": produce,
        "catch_up": [{"system": "tidemq", "per_s": 46264.0}, {"system": "nats", "per_s": 8460.0}, {"system": "redis", "per_s": 25784.0}],
        "durable": [
            {"system": s, "producers": p, "per_s": v}
            for s, p, v in (("tidemq", 1, 169.0), ("tidemq", 64, 119.0), ("redis", 1, 1741.0), ("redis", 64, 3697.0))
        ],
        "latency": latency,
    }


def texts(fig: Any) -> str:
    return " ".join(t.get_text() for t in fig.texts)


def test_throughput_panels_say_units_direction_numbers_and_legend() -> None:
    fig = throughput_figure(SYSTEMS, rows(), META)
    axes = fig.axes
    assert len(axes) == 4
    for ax in axes:
        assert "messages/s" in ax.get_ylabel() and "higher is better" in ax.get_ylabel(), ax.get_ylabel()
        assert ax.get_legend() is not None and len(ax.get_legend().get_texts()) == 3
        numbers = [t.get_text() for t in ax.texts if t.get_text()]
        assert len(numbers) == len(ax.patches), (ax.get_title(), numbers)  # a number (or n/a) per bar
    single, batched, catch_up, durable = axes
    # 195 .. 7,398 spans more than 20x: log; 9,275 .. 26,648 does not: linear.
    assert single.get_yscale() == "log" and "log scale" in single.get_ylabel()
    assert batched.get_yscale() == "linear" and catch_up.get_yscale() == "linear"
    assert "195" in [t.get_text() for t in single.texts] and "26.6k" in [t.get_text() for t in batched.texts]
    # The durable panel names the durable configurations; nats was not measured there, and says so.
    assert [t.get_text() for t in durable.get_legend().get_texts()][0] == "tidemq (SYNC_FLUSH)"
    assert "n/a" in [t.get_text() for t in durable.texts]
    caption = texts(fig)
    assert "2026-11-22 03:26 UTC" in caption and "2 cores" in caption and "4.44 / 4.69 / 5.06" in caption


def test_latency_chart_gives_the_achieved_rates_and_a_log_axis() -> None:
    fig = latency_figure(rows(), META)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and "µs" in ax.get_xlabel() and "lower is better" in ax.get_xlabel()
    assert "target 1,000 msg/s" in ax.get_title() and "tidemq 155" in ax.get_title() and "redis 1,000" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0].startswith("tidemq (ASYNC_FLUSH): sent 155 of 1,000 msg/s"), legend
    assert "load average" in texts(fig)


def test_write_charts_saves_both_pngs(tmp_path: Path) -> None:
    names = write_charts(tmp_path, "run", SYSTEMS, rows(), META)
    assert set(names.values()) == {"run-throughput.png", "run-latency.png"}
    for name in names.values():
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
