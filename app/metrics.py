"""Prometheus text exposition (format 0.0.4) of the store's and the front end's figures.

Sources: `store.stats_snapshot()` (counters, TPS windows, put latency histogram),
`store.runtime_info()` (commitlog offsets, dispatch lag, disk usage, cleanup), the replication
node's `metrics()` (tidemq_ha_*, absent on a standalone broker), the broker's own counters
(held long-polls, HTTP requests: app.http_requests), per-group and per-topic series
(app.group_metrics, app.topic_metrics) and the process's figures (app.process_metrics). Every
name starts with `tidemq_`; docs/http-api.md lists them.
"""

from __future__ import annotations

import gc
import math
from typing import Any, Literal

from app.broker import Broker
from app.group_metrics import group_families
from app.http_requests import BOUNDS_S, RequestStats
from app.process_metrics import process_samples
from app.push_metrics import push_families
from app.topic_metrics import label_value, topic_families
from store import CleanupStatus, RuntimeInfo, StatsSnapshot, TimerStatus, TransactionStatus

# The keys of the store's reports read by the tables below: mypy checks each against its report.
StatsCounter = Literal[
    "put_messages", "put_bytes", "put_failures", "get_found", "get_miss", "get_transferred_messages", "get_transferred_bytes"
]
RuntimeGauge = Literal[
    "commitlog_min_offset", "commitlog_max_offset", "commitlog_committed_offset", "commitlog_flushed_offset", "reput_offset",
    "dispatch_lag_bytes", "disk_used_ratio", "commitlog_files", "consume_queues", "topics", "disk_full", "index_files",
    "commitlog_damaged_bytes", "commitlog_damaged_range_count", "damaged_queue_entries",
]  # fmt: skip
RuntimeCounter = Literal["commitlog_group_flushes", "commitlog_flush_waits"]
CleanupCounter = Literal["commitlog_files_deleted", "consume_queue_files_deleted", "index_files_deleted", "passes"]
TimerCounter = Literal["enqueued", "delivered", "rolled", "deduplicated", "undeliverable", "retries"]
TransactionCounter = Literal["committed", "rolled_back", "checks", "check_rollbacks", "deduplicated"]

# store.stats_snapshot() counter -> (metric name, help).
COUNTERS: dict[StatsCounter, tuple[str, str]] = {
    "put_messages": ("tidemq_put_messages_total", "Messages stored"),
    "put_bytes": ("tidemq_put_bytes_total", "Bytes of messages stored"),
    "put_failures": ("tidemq_put_failures_total", "Puts that did not end PUT_OK"),
    "get_found": ("tidemq_get_found_total", "Reads that found messages"),
    "get_miss": ("tidemq_get_miss_total", "Reads that found none"),
    "get_transferred_messages": ("tidemq_get_messages_total", "Messages returned by reads"),
    "get_transferred_bytes": ("tidemq_get_bytes_total", "Bytes returned by reads"),
}
# store.stats_snapshot()["tps"][window] key -> (metric name, help).
RATES = {
    "put_messages": ("tidemq_put_tps", "Messages stored per second"),
    "put_bytes": ("tidemq_put_bytes_per_second", "Bytes stored per second"),
    "get_transferred_messages": ("tidemq_get_tps", "Messages returned by reads per second"),
    "get_found": ("tidemq_get_found_per_second", "Reads that found messages per second"),
}
# store.runtime_info() key -> (metric name, help).
GAUGES: dict[RuntimeGauge, tuple[str, str]] = {
    "commitlog_min_offset": ("tidemq_commitlog_min_offset", "Smallest commitlog offset still held"),
    "commitlog_max_offset": ("tidemq_commitlog_max_offset", "Commitlog offset after the last message"),
    "commitlog_committed_offset": ("tidemq_commitlog_committed_offset", "Commitlog offset committed to the file channel"),
    "commitlog_flushed_offset": ("tidemq_commitlog_flushed_offset", "Commitlog offset flushed to disk"),
    "reput_offset": ("tidemq_reput_offset", "Commitlog offset dispatched to consume queues and index"),
    "dispatch_lag_bytes": ("tidemq_dispatch_lag_bytes", "Bytes stored but not yet dispatched"),
    "disk_used_ratio": ("tidemq_disk_used_ratio", "Used share of the store's disk (0..1)"),
    "commitlog_files": ("tidemq_commitlog_files", "Commitlog files"),
    "consume_queues": ("tidemq_consume_queues", "Consume queues"),
    "topics": ("tidemq_topics", "Configured topics"),
    "disk_full": ("tidemq_disk_full", "1 when puts are refused for disk usage past the warning ratio"),
    "index_files": ("tidemq_index_files", "Index files"),
    "commitlog_damaged_bytes": ("tidemq_store_damaged_bytes", "Commitlog bytes found damaged by recovery and skipped (0 on a sound disk)"),
    "commitlog_damaged_range_count": ("tidemq_store_damaged_ranges", "Damaged commitlog ranges skipped by dispatch and reads"),
    "damaged_queue_entries": (
        "tidemq_store_damaged_queue_entries",
        "Consume-queue entries met by reads that point at no message (skipped)",
    ),
}

# store.runtime_info() counter -> (metric name, help).
RUNTIME_COUNTERS: dict[RuntimeCounter, tuple[str, str]] = {
    "commitlog_group_flushes": ("tidemq_commitlog_group_flushes_total", "SYNC_FLUSH flushes that answered produces waiting for them"),
    "commitlog_flush_waits": ("tidemq_commitlog_flush_waits_total", "SYNC_FLUSH waits for a flush (per group flush: the mean group)"),
}

# store.runtime_info()["cleanup"] counter -> (metric name, help).
CLEANUP: dict[CleanupCounter, tuple[str, str]] = {
    "commitlog_files_deleted": ("tidemq_cleanup_commitlog_files_deleted_total", "Commitlog files deleted by retention"),
    "consume_queue_files_deleted": ("tidemq_cleanup_consume_queue_files_deleted_total", "Consume queue files deleted by retention"),
    "index_files_deleted": ("tidemq_cleanup_index_files_deleted_total", "Index files deleted by retention"),
    "passes": ("tidemq_cleanup_passes_total", "Commitlog cleanup passes run"),
}


def _number(value: Any) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    return str(int(value))


def render(broker: Broker) -> str:
    """The metrics page."""
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, Any]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{labels} {_number(value)}")

    if broker.started:
        render_stats(lines, metric, broker.store.stats_snapshot())
        render_runtime(metric, broker.store.runtime_info())
    for name, kind, help_text, value in broker.ha.metrics() if broker.ha is not None and broker.started else []:
        metric(name, kind, help_text, [("", value)])
    for name, kind, help_text, value in broker.cluster.metrics() if broker.cluster is not None else []:
        metric(name, kind, help_text, [("", value)])
    timer = broker.store.timer_status() if broker.started else None
    if timer is not None:
        render_timer(metric, timer)
    if broker.started:
        render_transactions(metric, broker.store.transactions.status(), broker.checker.in_flight)
    render_collector(metric)
    metric("tidemq_held_pulls", "gauge", "Pulls held waiting for a message", [("", broker.held.held)])
    metric("tidemq_held_pulls_max", "gauge", "Bound on held pulls", [("", broker.held.max_held)])
    metric("tidemq_held_pulls_woken_total", "counter", "Held pulls woken by an arriving message", [("", broker.held.woken_total)])
    delivered = [("", broker.held.delivered_total)]
    metric(
        "tidemq_held_pulls_delivered_total", "counter", "Held pulls answered by the put of their message, before its dispatch", delivered
    )
    metric(
        "tidemq_held_pulls_refused_total", "counter", "Pulls refused a hold (bound reached or stopping)", [("", broker.held.refused_total)]
    )
    metric("tidemq_pulls_abandoned_total", "counter", "Held pulls whose client disconnected", [("", broker.pulls_abandoned_total)])
    streams = broker.streams
    metric("tidemq_streams_open", "gauge", "Event streams open", [("", streams.open_count)])
    metric("tidemq_streams_max", "gauge", "Bound on open event streams (max_streams)", [("", streams.max_streams)])
    metric("tidemq_streams_refused_total", "counter", "Event streams refused TOO_MANY_STREAMS", [("", streams.refused_total)])
    metric("tidemq_stream_unacked_messages", "gauge", "Messages event streams delivered and hold unacked", [("", streams.handles)])
    metric(
        "tidemq_access_revoked_total",
        "counter",
        "Held requests and streams ended by an ACL reload",
        [("", broker.revocations.revoked_total)],
    )
    metric(
        "tidemq_http_send_stalls_total",
        "counter",
        "Connections closed because their client took nothing for send_stall_timeout_ms",
        [("", broker.send_stalls_total)],
    )
    metric("tidemq_topics_auto_created_total", "counter", "Topics created by a produce", [("", broker.topics_created_total)])
    turns = broker.durable_turns
    groups, outlasted = (turns.groups, turns.passed_on) if turns is not None else (0, 0)
    lingered, lingered_out = (turns.lingered, turns.lingered_short) if turns is not None else (0, 0)
    metric("tidemq_durable_groups_total", "counter", "Flush (and slave) waits of a loop turn's durable produces", [("", groups)])
    metric(
        "tidemq_durable_groups_lingered_total",
        "counter",
        "Durable groups kept open past their turn while smaller than the last one (durable_group_linger_us)",
        [("", lingered)],
    )
    metric(
        "tidemq_durable_groups_lingered_out_total",
        "counter",
        "Of them, groups closed at the linger's end still smaller than the last one",
        [("", lingered_out)],
    )
    metric(
        "tidemq_durable_loop_waits_outlasted_total",
        "counter",
        "Durable groups whose wait outlasted durable_wait_in_loop_ms (answered when it ended, the loop serving meanwhile)",
        [("", outlasted)],
    )
    problems = sorted(broker.http_problems_total.items())
    metric("tidemq_http_problems_total", "counter", "Error replies by code", [(f'{{code="{c}"}}', n) for c, n in problems])
    if broker.started:
        for name, kind, help_text, samples in group_families(broker) + topic_families(broker) + push_families(broker):
            metric(name, kind, help_text, samples)
    render_http(lines, metric, broker.http_requests)
    for name, kind, help_text, value in process_samples():
        metric(name, kind, help_text, [("", value)])
    metric(
        "tidemq_ready",
        "gauge",
        "1 when the store is loaded, recovered, dispatch has caught up and no index rebuild runs",
        [("", int(broker.ready()))],
    )
    return "\n".join(lines) + "\n"


def render_stats(lines: list[str], metric: Any, stats: StatsSnapshot) -> None:
    """The put and get counters, their rates per window and the put latency histogram."""
    for key, (name, help_text) in COUNTERS.items():
        metric(name, "counter", help_text, [("", stats[key])])
    for rate, (name, help_text) in RATES.items():
        samples = [(f'{{window="{w}"}}', rates[rate]) for w, rates in stats["tps"].items() if rate in rates]
        if samples:
            metric(name, "gauge", help_text + " over a sliding window", samples)
    cumulative = 0
    histogram: list[tuple[str, float]] = []
    bounds = [*stats["put_latency_bounds_us"], math.inf]
    for bound_us, count in zip(bounds, stats["put_latency_buckets"], strict=True):
        cumulative += count
        le = "+Inf" if math.isinf(bound_us) else repr(bound_us / 1e6)
        histogram.append((f'_bucket{{le="{le}"}}', cumulative))
    histogram.append(("_sum", stats["put_latency_sum_us"] / 1e6))
    histogram.append(("_count", cumulative))
    lines.append("# HELP tidemq_put_latency_seconds Time a put held the commitlog (append) per request")
    lines.append("# TYPE tidemq_put_latency_seconds histogram")
    lines.extend(f"tidemq_put_latency_seconds{suffix} {_number(v)}" for suffix, v in histogram)


def render_collector(metric: Any) -> None:
    """The interpreter's cyclic garbage collector: collections per generation, and the objects frozen out of it."""
    by_generation = [(f'{{generation="{g}"}}', stats["collections"]) for g, stats in enumerate(gc.get_stats())]
    metric("tidemq_gc_collections_total", "counter", "Cyclic garbage collections, by generation", by_generation)
    metric(
        "tidemq_gc_frozen_objects",
        "gauge",
        "Objects kept out of collections (the heap frozen once the store runs)",
        [("", gc.get_freeze_count())],
    )


def render_runtime(metric: Any, info: RuntimeInfo) -> None:
    """The commitlog, dispatch, disk and file gauges and the cleanup counters."""
    for key, (name, help_text) in GAUGES.items():
        metric(name, "gauge", help_text, [("", info[key])])
    for counter_key, (name, help_text) in RUNTIME_COUNTERS.items():
        metric(name, "counter", help_text, [("", info[counter_key])])
    cleanup: CleanupStatus = info["cleanup"]
    for counter, (name, help_text) in CLEANUP.items():
        metric(name, "counter", help_text, [("", cleanup[counter])])


TIMER_COUNTERS: dict[TimerCounter, tuple[str, str]] = {
    "enqueued": ("tidemq_timer_enqueued_total", "Timer log units written (rolls included)"),
    "delivered": ("tidemq_timer_delivered_total", "Timer messages put to their real topic"),
    "rolled": ("tidemq_timer_rolled_total", "Timer messages put round the timer topic again (beyond the roll window)"),
    "deduplicated": ("tidemq_timer_deduplicated_total", "Timer deliveries found already made before a crash"),
    "undeliverable": ("tidemq_timer_undeliverable_total", "Timer messages skipped for good"),
    "retries": ("tidemq_timer_retries_total", "Timer deliveries refused for a passing reason and retried"),
}


def render_timer(metric: Any, timer: TimerStatus) -> None:
    """The tidemq_timer_* families from the store's timer status."""
    metric("tidemq_timer_pending", "gauge", "Timer messages not yet delivered", [("", timer["pending"])])
    next_due_ms = timer["next_due_ms"]
    if next_due_ms is not None:
        # In seconds: Prometheus names carry base units (promtool refuses "_ms").
        metric("tidemq_timer_next_due_timestamp_seconds", "gauge", "When the earliest pending timer message is deliverable (seconds since the epoch)",
               [("", next_due_ms / 1000)])  # fmt: skip
    for key, (name, help_text) in TIMER_COUNTERS.items():
        metric(name, "counter", help_text, [("", timer[key])])
    lateness = timer["lateness"]
    cumulative = 0
    samples: list[tuple[str, Any]] = []
    for bucket in lateness["buckets"]:
        cumulative += bucket["count"]
        le = "+Inf" if bucket["le_ms"] is None else repr(bucket["le_ms"] / 1000)
        samples.append((f'_bucket{{le="{le}"}}', cumulative))
    samples.append(("_sum", (lateness["mean_ms"] or 0) * lateness["count"] / 1000))
    samples.append(("_count", lateness["count"]))
    metric("tidemq_timer_lateness_seconds", "histogram", "Delivery time minus the time a timer message was due", samples)


# Transactions' status key -> (metric name, help).
TRANSACTION_COUNTERS: dict[TransactionCounter, tuple[str, str]] = {
    "committed": ("tidemq_transaction_committed_total", "Transactions committed (their message put to its real topic)"),
    "rolled_back": ("tidemq_transaction_rolled_back_total", "Transactions rolled back (by the producer, a check or transaction_check_max)"),
    "checks": ("tidemq_transaction_checks_total", "Checks of unresolved transactions (sent to a check URL or listed)"),
    "check_rollbacks": ("tidemq_transaction_check_rollbacks_total", "Transactions rolled back after transaction_check_max checks"),
    "deduplicated": ("tidemq_transaction_deduplicated_total", "Commits found already put before a crash, only recorded"),
}


def render_transactions(metric: Any, status: TransactionStatus, in_flight: int) -> None:
    """The tidemq_transaction_* families from the store's transaction status."""
    metric("tidemq_transaction_half_pending", "gauge", "Half messages not yet committed or rolled back", [("", status["pending"])])
    metric("tidemq_transaction_unknown", "gauge", "Half messages unresolved past transaction_timeout_ms", [("", status["unknown"])])
    for key, (name, help_text) in TRANSACTION_COUNTERS.items():
        metric(name, "counter", help_text, [("", status[key])])
    answers = [(f'{{answer="{a}"}}', n) for a, n in sorted(status["check_answers"].items())]
    metric("tidemq_transaction_check_answers_total", "counter", "Check-back answers by kind (failed: timeout, error, bad reply)", answers)
    metric("tidemq_transaction_checks_in_flight", "gauge", "Check-back requests under way", [("", in_flight)])


def render_http(lines: list[str], metric: Any, stats: RequestStats) -> None:
    """tidemq_http_* families: requests, latency histogram and bytes by route, method and status."""
    rows = [(f'route="{label_value(r)}",method="{m}",status="{s}"', t) for r, m, s, t in stats.rows()]
    metric("tidemq_http_requests_total", "counter", "HTTP requests answered, by route template, method and status",
           [(f"{{{labels}}}", t.requests) for labels, t in rows])  # fmt: skip
    lines.append("# HELP tidemq_http_request_duration_seconds Time from a request's arrival to the end of its reply")
    lines.append("# TYPE tidemq_http_request_duration_seconds histogram")
    bounds = [repr(b) for b in BOUNDS_S] + ["+Inf"]
    for labels, t in rows:
        cumulative = 0
        for le, count in zip(bounds, t.buckets, strict=True):
            cumulative += count
            lines.append(f'tidemq_http_request_duration_seconds_bucket{{{labels},le="{le}"}} {cumulative}')
        lines.append(f"tidemq_http_request_duration_seconds_sum{{{labels}}} {_number(t.duration_ns / 1e9)}")
        lines.append(f"tidemq_http_request_duration_seconds_count{{{labels}}} {t.requests}")
    metric("tidemq_http_response_bytes_total", "counter", "Response body bytes sent, by route template, method and status",
           [(f"{{{labels}}}", t.bytes) for labels, t in rows])  # fmt: skip
    metric("tidemq_http_requests_in_flight", "gauge", "HTTP requests being served (held long-polls included)", [("", stats.in_flight)])
