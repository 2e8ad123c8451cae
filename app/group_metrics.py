"""Per-group series for /metrics, bounded by `metrics_max_groups`.

The (group, topic) pairs are those the store knows a group consumed: every group that committed
offsets (`topics_by_group`, receive commits them too) and every group with receive counts. Sorted,
the first `metrics_max_groups` get series; the rest are only counted
(tidemq_metrics_groups_omitted), so many groups cannot make a scrape unbounded.
"""

from __future__ import annotations

from typing import Any

from app.broker import Broker
from app.routes_groups import group_lag
from app.topic_metrics import Family, label_value
from store import MessageStore, PopCounts, retry_topic

# PopCounts field -> (metric name, kind, help), labelled by group and topic.
POP_COUNTS = {
    "received": ("tidemq_group_received_total", "counter", "Messages received by the group"),
    "acked": ("tidemq_group_acked_total", "counter", "Messages the group acked"),
    "redelivered": ("tidemq_group_redelivered_total", "counter", "Messages redelivered to the group after their invisible time"),
    "dead_lettered": ("tidemq_group_dead_lettered_total", "counter", "Messages moved to the group's dead-letter topic"),
    "in_flight": ("tidemq_group_in_flight", "gauge", "Messages received and not yet acked, redelivered or dead-lettered"),
}


def committed_offset(store: MessageStore, group: str, topic: str) -> int:
    """The sum of the group's committed offsets over the topic's queues (and its retry topic's); none counts 0."""
    total = 0
    for name in (topic, retry_topic(group, topic)):
        config = store.topic_config(name)
        for q in range(config.read_queue_nums if config is not None else 0):
            total += max(0, store.query_offset(group, name, q))
    return total


def group_families(broker: Broker) -> list[Family]:
    """tidemq_group_* families and tidemq_metrics_groups_omitted."""
    store = broker.store
    gc = store.group_consumption
    counts = gc.counts()
    pairs = set(counts) | {(g, t) for g, topics in gc.topics_by_group().items() for t in topics}
    exported = sorted(pairs)[: broker.settings.metrics_max_groups]
    rows = [(f'{{group="{label_value(g)}",topic="{label_value(t)}"}}', g, t, counts.get((g, t)) or PopCounts()) for g, t in exported]
    families: list[Family] = [
        (name, kind, help_text, [(labels, getattr(c, field)) for labels, _, _, c in rows])
        for field, (name, kind, help_text) in POP_COUNTS.items()
    ]
    lags = [(labels, group_lag(store, g, t)) for labels, g, t, _ in rows]
    families.append(("tidemq_group_lag", "gauge", "Messages of the topic (and the group's retry topic) past the group's offsets", lags))
    offsets: list[tuple[str, Any]] = [(labels, committed_offset(store, g, t)) for labels, g, t, _ in rows]
    families.append(("tidemq_group_committed_offset", "gauge",
                     "Sum of the group's committed offsets over the topic's queues; its deriv() is the consume rate", offsets))  # fmt: skip
    families.append(("tidemq_metrics_groups_omitted", "gauge", "Group and topic pairs left out of the tidemq_group_* series "
                     "(past metrics_max_groups)", [("", len(pairs) - len(exported))]))  # fmt: skip
    stats = gc.stats()
    families.append(("tidemq_revive_held_records", "gauge", "Checkpoints and early acks the revive service holds",
                     [("", stats["revive_in_memory"])]))  # fmt: skip
    families.append(("tidemq_revive_lost_total", "counter", "Unacked messages retention removed before they could be redelivered",
                     [("", stats["lost"])]))  # fmt: skip
    return families
