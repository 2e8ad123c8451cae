"""Per-topic series for /metrics, bounded by `metrics_max_topics`.

The topics are the store's (system topics left out), sorted by name; the first
`metrics_max_topics` get series, the rest are only counted (tidemq_metrics_topics_omitted), so
a broker with many topics cannot make a scrape unbounded. Figures come from the store's public
API (queue offsets) and the broker's count of messages pulls returned per topic.
"""

from __future__ import annotations

from typing import Any

from app.broker import Broker
from store import SYSTEM_TOPICS

# (name, kind, help, [(labels, value)])
Family = tuple[str, str, str, list[tuple[str, Any]]]


def label_value(text: str) -> str:
    """A label value escaped as the text format asks (backslash, double quote, newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def topic_families(broker: Broker) -> list[Family]:
    """tidemq_topic_* families and tidemq_metrics_topics_omitted."""
    store = broker.store
    configs = sorted((c for c in store.topic_configs() if c.topic_name not in SYSTEM_TOPICS), key=lambda c: c.topic_name)
    pulled = broker.topic_pulled_total
    names = {c.topic_name for c in configs}
    for gone in [t for t in pulled if t not in names]:  # a deleted topic's count goes with it
        del pulled[gone]
    exported = configs[: broker.settings.metrics_max_topics]
    put, retained, pulls, queues = [], [], [], []
    for config in exported:
        labels = f'{{topic="{label_value(config.topic_name)}"}}'
        max_total = min_total = 0
        for q in range(config.read_queue_nums):
            max_total += store.get_max_offset_in_queue(config.topic_name, q)
            min_total += store.get_min_offset_in_queue(config.topic_name, q)
        put.append((labels, max_total))
        retained.append((labels, max(0, max_total - min_total)))
        pulls.append((labels, pulled.get(config.topic_name, 0)))
        queues.append((labels, config.read_queue_nums))
    return [
        ("tidemq_topic_messages_total", "counter", "Messages put to the topic since it was created (sum of its queues' max offsets)", put),
        ("tidemq_topic_retained_messages", "gauge", "Messages of the topic still in the store (max minus min offsets)", retained),
        ("tidemq_topic_pulled_messages_total", "counter", "Messages pulls of the topic returned", pulls),
        ("tidemq_topic_queues", "gauge", "Read queues of the topic", queues),
        ("tidemq_metrics_topics_omitted", "gauge", "Topics left out of the tidemq_topic_* series (past metrics_max_topics)",
         [("", len(configs) - len(exported))]),
    ]  # fmt: skip
