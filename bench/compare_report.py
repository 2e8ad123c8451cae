"""The comparison's report: one markdown file and two PNG charts beside it.

`<out>/<date>-<host>.md` holds every figure per system, tidemq's ratio to each peer, the goals
and whether each was met, the machine (with the disk rate measured in the run), versions and
the exact commands. `<date>-<host>-throughput.png` has the throughput bars and
`<date>-<host>-latency.png` the end-to-end latency CDF (bench/compare_charts.py).

Invariant: every section is always written, with a line saying why it is empty when a system
was skipped or a workload failed, so a reader (and the smoke test) can rely on the layout.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from bench.compare_charts import write_charts

SYSTEMS = ("tidemq", "nats", "redis")
PEERS = ("nats", "redis")
SECTIONS = (
    "## Goals",
    "## Produce throughput",
    "## Catch-up consume",
    "## End-to-end latency",
    "## Durable produce",
    "## Charts",
    "## Machine",
    "## Versions and commands",
    "## Method",
    "## Skipped and failed",
)
# An achieved send rate below this fraction of the target is called out next to the latency goal.
LATENCY_RATE_SHORTFALL = 0.9


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def _ratio_text(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}x"


def _pick(rows: list[dict[str, Any]], system: str, key: str, **match: Any) -> float | None:
    for row in rows:
        if row["system"] == system and all(row.get(k) == v for k, v in match.items()):
            value: float | None = row[key]
            return value
    return None


def _labels(systems: dict[str, dict[str, Any]], role: str) -> dict[str, str]:
    return {e["system"]: label for label, e in systems.items() if e["role"] == role}


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return lines


def _figure_table(
    rows: list[dict[str, Any]], labels: dict[str, str], keys: list[tuple[str, dict[str, Any]]], key: str, digits: int = 0
) -> list[str]:
    header = ["test", *[labels.get(s, s) for s in SYSTEMS], *[f"tidemq / {p}" for p in PEERS]]
    body = []
    for name, match in keys:
        values = {s: _pick(rows, s, key, **match) for s in SYSTEMS}
        body.append([name, *[_fmt(values[s], digits) for s in SYSTEMS], *[_ratio_text(_ratio(values["tidemq"], values[p])) for p in PEERS]])
    return _table(header, body)


def goals(rows: dict[str, list[dict[str, Any]]], sizes: list[int], batch_mode: str) -> list[tuple[str, float | None, float]]:
    """(goal, measured ratio, ratio needed); a ratio is tidemq's figure over the peer's (latency: peer's over tidemq's)."""
    out: list[tuple[str, float | None, float]] = []
    produce = rows["produce"]
    for size in sizes:
        t, r = _pick(produce, "tidemq", "per_s", size=size, mode=batch_mode), _pick(produce, "redis", "per_s", size=size, mode=batch_mode)
        out.append((f"batched produce {size} B >= 2x Redis Streams pipelined", _ratio(t, r), 2.0))
    for size in sizes:
        t, n = _pick(produce, "tidemq", "per_s", size=size, mode="single"), _pick(produce, "nats", "per_s", size=size, mode="single")
        out.append((f"single-call produce {size} B >= JetStream (nats-py js.publish)", _ratio(t, n), 1.0))
    t, r = _pick(rows["catch_up"], "tidemq", "per_s"), _pick(rows["catch_up"], "redis", "per_s")
    out.append(("catch-up consume >= 2x Redis XREAD COUNT batches", _ratio(t, r), 2.0))
    t, r = _pick(rows["latency"], "tidemq", "p99_us"), _pick(rows["latency"], "redis", "p99_us")
    out.append(("delivery p99 <= Redis XREAD BLOCK's (ratio = Redis p99 / tidemq p99)", _ratio(r, t), 1.0))
    t, r = _pick(rows["durable"], "tidemq", "per_s", producers=64), _pick(rows["durable"], "redis", "per_s", producers=64)
    out.append(("durable produce, 64 producers, SYNC_FLUSH >= Redis appendfsync always", _ratio(t, r), 1.0))
    return out


def _goal_lines(rows: dict[str, list[dict[str, Any]]], sizes: list[int], batch_mode: str, target_rate: int) -> list[str]:
    body = []
    achieved = _pick(rows["latency"], "tidemq", "achieved_per_s")
    for goal, ratio, needed in goals(rows, sizes, batch_mode):
        verdict = "not measured" if ratio is None else ("met" if ratio >= needed else "MISSED")
        if goal.startswith("delivery") and achieved is not None and achieved < LATENCY_RATE_SHORTFALL * target_rate:
            verdict += f" (tidemq sent only {achieved:,.0f} of the {target_rate:,} messages/s asked)"
        body.append([goal, _ratio_text(ratio), f"{needed:.1f}x", verdict])
    return _table(["goal", "measured", "needed", "verdict"], body)


def write_report(
    out: Path, meta: dict[str, Any], systems: dict[str, dict[str, Any]], rows: dict[str, list[dict[str, Any]]], failures: list[str]
) -> Path:
    stem = f"{meta['date'][:10]}-{re.sub(r'[^A-Za-z0-9_.-]', '_', meta['machine']['host'] or 'host')}"
    if meta["plan"]["name"] != "full":
        stem += f"-{meta['plan']['name']}"
    charts = write_charts(out, stem, systems, rows, meta)
    path = out / f"{stem}.md"
    path.write_text("\n".join(markdown(meta, systems, rows, failures, charts)) + "\n")
    return path


def markdown(
    meta: dict[str, Any],
    systems: dict[str, dict[str, Any]],
    rows: dict[str, list[dict[str, Any]]],
    failures: list[str],
    charts: dict[str, str],
) -> list[str]:
    plan, machine = meta["plan"], meta["machine"]
    return [
        f"# tidemq, NATS JetStream and Redis Streams side by side ({meta['date']}, {machine['host']})",
        "",
        f"Plan `{plan['name']}`, made by `{meta['command']}` in {meta['seconds']:.0f} s. Throughput is messages/s (higher is better),"
        " latency is microseconds (lower is better); `tidemq / peer` is tidemq's figure divided by the peer's.",
        "",
        "## Goals",
        "",
        *_goal_lines(rows, list(plan["sizes"]), f"batch{plan['batch']}", plan["latency_rate_per_s"]),
        "",
        *_figure_sections(plan, systems, rows),
        "## Charts",
        "",
        *[f"![{name}]({file})" for name, file in charts.items()],
        "",
        *_context_sections(meta, systems),
        "## Method",
        "",
        *_method_lines(plan),
        "",
        "## Skipped and failed",
        "",
        *([f"- {label}: skipped: {e['skipped']}" for label, e in systems.items() if e.get("skipped")] or ["- no system skipped"]),
        *([f"- failed: {f}" for f in failures] or ["- no workload failed"]),
    ]


def _figure_sections(plan: dict[str, Any], systems: dict[str, dict[str, Any]], rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    fast, durable = _labels(systems, "fast"), _labels(systems, "durable")
    batch_mode = f"batch{plan['batch']}"
    produce_tests = [(f"{mode} {size} B", {"size": size, "mode": mode}) for mode in ("single", batch_mode) for size in plan["sizes"]]
    return [
        "## Produce throughput",
        "",
        f"{plan['concurrency']} calls in flight; `single` = one message per call, `{batch_mode}` = {plan['batch']} messages per call"
        " (tidemq: one JSON POST; JetStream: a window of async publishes; Redis: a non-transactional pipeline of XADD). Messages/s:",
        "",
        *_figure_table(rows["produce"], fast, produce_tests, "per_s"),
        "",
        "Server CPU per message stored (µs, the process CPU clock around the run; lower is better):",
        "",
        *_figure_table(rows["produce"], fast, produce_tests, "server_cpu_us_per_msg", 1),
        "",
        "## Catch-up consume",
        "",
        f"{plan['catch_up_count']:,} stored messages of {plan['catch_up_size']} B read from the start by one consumer, up to 1,000 per"
        " call (tidemq: batch-format pulls; JetStream: pull consumer fetch(1000), no acks; Redis: XREAD COUNT 1000). Messages/s:",
        "",
        *_figure_table(rows["catch_up"], fast, [("read", {})], "per_s"),
        "",
        "Storing the backlog (untimed in the figure above, batches of 1,000 from 4 tasks), messages/s:",
        "",
        *_figure_table(rows["catch_up"], fast, [("store", {})], "store_per_s"),
        "",
        "Server CPU per message read, storing the backlog included (µs):",
        "",
        *_figure_table(rows["catch_up"], fast, [("store + read", {})], "server_cpu_us_per_msg", 1),
        "",
        "## End-to-end latency",
        "",
        f"One producer at a fixed {plan['latency_rate_per_s']:,} messages/s of {plan['latency_size']} B, {plan['latency_count']:,} timed"
        f" after {plan['latency_warmup']:,} warm-up; latency = consumer receipt - producer send (tidemq: long-poll GET; JetStream:"
        f" pull consumer; Redis: XREAD BLOCK), at most {plan['concurrency']} sends outstanding: a system that cannot keep up holds"
        " the producer back, which shows as an achieved send rate below the target. `tidemq / peer` below 1 means tidemq is faster.",
        "",
        *_latency_table(rows["latency"], fast),
        "",
        "## Durable produce",
        "",
        f"One message of {plan['durable_size']} B per call; a reply means: tidemq SYNC_FLUSH = fsynced (group commit); Redis"
        " appendfsync always = fsynced; JetStream default = stored, fsynced within 2 minutes (not per message). Messages/s:",
        "",
        *_figure_table(rows["durable"], durable, [(f"{p} producer(s)", {"producers": p}) for p in plan["durable_count"]], "per_s"),
        "",
        "Server CPU per durable message (µs):",
        "",
        *_figure_table(
            rows["durable"], durable, [(f"{p} producer(s)", {"producers": p}) for p in plan["durable_count"]], "server_cpu_us_per_msg", 1
        ),
        "",
    ]


def _context_sections(meta: dict[str, Any], systems: dict[str, dict[str, Any]]) -> list[str]:
    machine = meta["machine"]
    return [
        "## Machine",
        "",
        f"- CPU: {machine['cpu']}, {machine['cores']} cores; memory {machine['memory_gib']} GiB; {machine['kernel']}",
        f"- Disk (the run's temporary directory): {machine['disk_write_mib_s']} MiB/s sequential write of {machine['disk_write_mib']} MiB"
        f" ending with fsync; {machine['fsync_4k_us']} us per 4 KiB write + fsync",
        f"- Load average (1/5/15 min) at the start: {machine['load_start']}; at the end: {machine['load_end']} (the machine is shared;"
        " other work running beside the benchmark shows here)",
        "- Each server runs alone (started before its tests, stopped after), the client in one Python process beside it.",
        "",
        "## Versions and commands",
        "",
        f"- Harness: `{meta['command']}` (Python {machine['python']})",
        *[f"- {label}: {e.get('version', 'n/a')}; `{e.get('command', 'not started')}`" for label, e in systems.items()],
        "- tidemq's --config file raises the pull batch limits so a pull can return 1,000 messages:",
        "",
        "```toml",
        *meta["tidemq_toml"].strip().splitlines(),
        "```",
        "",
        *([f"- apt: `{c}`" for c in meta["apt"]] or ["- apt: nothing installed by this run"]),
        "",
    ]


def _latency_table(rows: list[dict[str, Any]], labels: dict[str, str]) -> list[str]:
    header = ["system", "p50 us", "p99 us", "p999 us", "received / sent", "achieved send rate /s", "tidemq p99 / peer p99"]
    body = []
    for s in SYSTEMS:
        row = next((r for r in rows if r["system"] == s), None)
        if row is None:
            body.append([labels.get(s, s), *["n/a"] * (len(header) - 1)])
            continue
        ratios = " / ".join(f"{p}: {_ratio_text(_ratio(row['p99_us'], _pick(rows, p, 'p99_us')))}" for p in PEERS if s == "tidemq")
        quantiles = [_fmt(row[k]) for k in ("p50_us", "p99_us", "p999_us")]
        counts = f"{row['received']:,} / {row['sent']:,}"
        body.append([labels.get(s, s), *quantiles, counts, _fmt(row["achieved_per_s"]), ratios or "-"])
    return _table(header, body)


def _method_lines(plan: dict[str, Any]) -> list[str]:
    single = ", ".join(f"{s} B: {n:,}" for s, n in plan["single_count"].items())
    batched = ", ".join(f"{s} B: {n:,}" for s, n in plan["batch_count"].items())
    durable = ", ".join(f"{p} producers: {n:,}" for p, n in plan["durable_count"].items())
    return [
        f"- Messages per produce test, one per call: {single}; batched: {batched}.",
        f"- Catch-up: {plan['catch_up_count']:,} messages of {plan['catch_up_size']} B (128 B keeps the backlog small; the read"
        " path's cost is per message).",
        f"- Durable produce messages: {durable}.",
        "- Every system gets one queue / stream / key per test, dropped after it; bodies are random ASCII made before the clock starts.",
        '- Redis runs with `--save ""` (no RDB snapshots) so only the AOF policy under test touches the disk.',
        "- Clients: httpx.AsyncClient (HTTP/1.1 keep-alive, pool = concurrency + 2), nats-py, redis-py asyncio (pool = concurrency + 2).",
        "- Latency producer and consumer share one process and event loop and the same monotonic clock. Each send starts on its"
        f" schedule unless {plan['concurrency']} sends are already outstanding; the clock of a message starts when its send starts,"
        " so time spent held back is not in the latency but shows as an achieved send rate below the target.",
    ]
