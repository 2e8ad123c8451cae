"""The comparison's two charts (matplotlib, Agg backend), each readable without the report beside it.

- Throughput: one panel per workload, bars per system with their value printed on them, the
  y axis in messages/s marked "higher is better", on a log scale when a panel's values span more
  than `LOG_SCALE_SPAN` (the slowest bar would otherwise be invisible); every panel has a legend
  with the systems' configurations.
- Latency: the end-to-end latency CDF on a log axis marked "lower is better"; each line's legend
  gives the send rate the system really achieved beside the target, and the title says it too.
- Both carry a caption with the machine, the date and the load average at the start and end.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

# Colours per system; also the order systems are drawn in.
COLORS = {"tidemq": "#1f77b4", "nats": "#2ca02c", "redis": "#d62728"}
# A panel whose largest value is more than this many times its smallest gets a log y axis.
LOG_SCALE_SPAN = 20.0
# Points kept per latency CDF line (the sorted samples are thinned evenly, ends kept).
CDF_POINTS = 2000


def _thin(samples: list[float]) -> list[float]:
    if len(samples) <= CDF_POINTS:
        return samples
    step = (len(samples) - 1) / (CDF_POINTS - 1)
    return [samples[round(i * step)] for i in range(CDF_POINTS)]


def _value(rows: list[dict[str, Any]], system: str, match: dict[str, Any]) -> float | None:
    for row in rows:
        if row["system"] == system and all(row.get(k) == v for k, v in match.items()):
            value = row.get("per_s")
            return None if value is None or math.isnan(value) else float(value)
    return None


def _short(value: float) -> str:
    """A bar's number: 3 significant figures with k/M, so it fits above a narrow bar."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def caption(meta: dict[str, Any]) -> str:
    machine = meta["machine"]
    return (
        f"{meta['date']} on {machine['host']}: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB; "
        f"load average (1/5/15 min) {machine['load_start']} at the start, {machine['load_end']} at the end (shared machine). "
        f"Plan {meta['plan']['name']}; {meta['plan']['concurrency']} calls in flight."
    )


def _labels(systems: dict[str, dict[str, Any]], role: str) -> dict[str, str]:
    return {e["system"]: label for label, e in systems.items() if e["role"] == role}


def _bar_panel(ax: Any, title: str, data: list[dict[str, Any]], groups: list[tuple[str, dict[str, Any]]], labels: dict[str, str]) -> None:
    width = 0.8 / len(COLORS)
    drawn: list[float] = []
    missing: list[float] = []  # x of each bar not measured (a skipped system or a failed workload)
    for i, system in enumerate(COLORS):
        values = [_value(data, system, m) for _, m in groups]
        xs = [g + i * width for g in range(len(groups))]
        heights = [v if v is not None and v > 0 else math.nan for v in values]
        bars = ax.bar(xs, heights, width, label=labels.get(system, system), color=COLORS[system])
        ax.bar_label(bars, labels=[_short(v) if v is not None and v > 0 else "" for v in values], fontsize=7, padding=2)
        drawn += [v for v in values if v is not None and v > 0]
        missing += [x for x, h in zip(xs, heights, strict=True) if math.isnan(h)]
    ax.set_xticks([g + width for g in range(len(groups))], [name for name, _ in groups])
    log = bool(drawn) and max(drawn) / min(drawn) > LOG_SCALE_SPAN
    # Head room above the tallest bar for its number and the legend (which must not hide a bar).
    if log:
        ax.set_yscale("log")
        ax.set_ylim(min(drawn) / 2, max(drawn) * 40)
    else:
        ax.set_ylim(0, (max(drawn) if drawn else 1) * 1.6)
    for x in missing:
        ax.text(x, ax.get_ylim()[0], "n/a", ha="center", va="bottom", fontsize=7)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("messages/s" + (", log scale" if log else "") + "\n(higher is better)")
    ax.grid(axis="y", alpha=0.3, which="both" if log else "major")
    ax.legend(fontsize=7, loc="upper right")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def throughput_figure(systems: dict[str, dict[str, Any]], rows: dict[str, list[dict[str, Any]]], meta: dict[str, Any]) -> Any:
    """The throughput chart as a matplotlib Figure (the caller saves and closes it)."""
    plt = _pyplot()

    plan = meta["plan"]
    fast, durable = _labels(systems, "fast"), _labels(systems, "durable")
    batch_mode = f"batch{plan['batch']}"
    panels: list[tuple[str, list[dict[str, Any]], list[tuple[str, dict[str, Any]]], dict[str, str]]] = [
        ("produce, 1 message per call", rows["produce"], [(f"{s} B", {"size": s, "mode": "single"}) for s in plan["sizes"]], fast),
        (f"produce, {plan['batch']} messages per call", rows["produce"],
         [(f"{s} B", {"size": s, "mode": batch_mode}) for s in plan["sizes"]], fast),
        (f"catch-up read of {plan['catch_up_size']} B messages", rows["catch_up"], [("read", {})], fast),
        (f"durable produce, {plan['durable_size']} B, 1 per call", rows["durable"],
         [(f"{p} producer{'s' if p != 1 else ''}", {"producers": p}) for p in plan["durable_count"]], durable),
    ]  # fmt: skip
    fig, axes = plt.subplots(1, len(panels), figsize=(18, 5.4))
    for ax, (title, data, groups, labels) in zip(axes, panels, strict=True):
        _bar_panel(ax, title, data, groups, labels)
    fig.suptitle("Throughput, messages per second (higher is better)", fontsize=12)
    fig.text(0.5, 0.01, caption(meta), ha="center", fontsize=8, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    return fig


def latency_figure(rows: dict[str, list[dict[str, Any]]], meta: dict[str, Any]) -> Any:
    """The latency CDF chart as a matplotlib Figure (the caller saves and closes it)."""
    plt = _pyplot()

    plan = meta["plan"]
    target = plan["latency_rate_per_s"]
    fig, ax = plt.subplots(figsize=(9, 7))
    achieved = []
    for row in rows["latency"]:
        samples = _thin(row["samples_us"])
        rate = row.get("achieved_per_s")
        rate_text = "n/a" if rate is None else f"{rate:,.0f}"
        achieved.append(f"{row['system']} {rate_text}")
        if samples:
            label = f"{row['label']}: sent {rate_text} of {target:,} msg/s, p99 {row['p99_us']:,.0f} µs"
            ax.plot(samples, [(i + 1) / len(samples) for i in range(len(samples))], label=label, color=COLORS[row["system"]])
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency, µs (log scale; lower is better: curves to the left)")
    ax.set_ylabel("fraction of messages delivered within that latency")
    ax.set_ylim(0, 1.02)
    ax.set_title(
        f"Delivery latency CDF, {plan['latency_size']} B messages, target {target:,} msg/s\n"
        f"achieved send rates (msg/s): {', '.join(achieved) or 'none measured'}",
        fontsize=10,
    )
    ax.grid(alpha=0.3, which="both")
    if rows["latency"]:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1)  # below the axes: curves stay clear
    fig.text(0.5, 0.01, caption(meta), ha="center", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)


def write_charts(
    out: Path, stem: str, systems: dict[str, dict[str, Any]], rows: dict[str, list[dict[str, Any]]], meta: dict[str, Any]
) -> dict[str, str]:
    """Both charts into `out`; their file names by the name the report gives them."""
    throughput, latency = f"{stem}-throughput.png", f"{stem}-latency.png"
    _save(throughput_figure(systems, rows, meta), out / throughput)
    _save(latency_figure(rows, meta), out / latency)
    return {"throughput": throughput, "latency CDF": latency}
