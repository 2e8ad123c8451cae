"""Per-subscription series of push delivery for /metrics.

Push subscriptions are bounded by `push_max_subscriptions`, so their series are too; counts are
since the broker started (a new master starts from zero, as every counter of a restarted process).
"""

from __future__ import annotations

from app.broker import Broker
from app.topic_metrics import Family, label_value

# PushCounts field -> the outcome label of tidemq_push_deliveries_total.
OUTCOMES = {"delivered": "delivered", "failed": "failed", "errors": "error", "too_large": "too_large"}


def push_families(broker: Broker) -> list[Family]:
    """The tidemq_push_* families."""
    gc = broker.store.group_consumption
    subs = gc.push_subscriptions()
    counts = broker.push.counts()
    deliveries = []
    in_flight = []
    for sub in subs:
        c = counts.get(sub.group)
        group = label_value(sub.group)
        for field, outcome in OUTCOMES.items():
            deliveries.append((f'{{group="{group}",outcome="{outcome}"}}', getattr(c, field) if c is not None else 0))
        in_flight.append((f'{{group="{group}"}}', c.in_flight if c is not None else 0))
    families: list[Family] = [
        ("tidemq_push_subscriptions", "gauge", "Push subscriptions the broker holds", [("", len(subs))]),
        ("tidemq_push_deliveries_total", "counter",
         "Push deliveries by outcome: delivered (2xx), failed (another status), error (no reply), too_large (dead-lettered unposted)",
         deliveries),
        ("tidemq_push_in_flight", "gauge", "Push deliveries under way", in_flight),
        ("tidemq_push_delivering", "gauge", "1 while this broker delivers push subscriptions (a master accepting writes)",
         [("", int(broker.may_deliver()))]),
    ]  # fmt: skip
    return families
