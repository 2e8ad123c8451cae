"""ConsumerRegistry: the consumers a group has now, as the console and `GET /v1/groups/{group}` show
them (rocketmq-dashboard's "consumer connections", Redpanda Console's group members).

A consumer is a client (its address and User-Agent) that received or acked for the group, or pulled
with `?group=`: it counts as connected while one of its requests is under way (a held receive or pull)
and for CONNECTED_MS after its last one ended. HTTP has no session, so this is what "connected" can
mean; an event stream (`.../stream`) is not counted here.

Used on the event loop only (the routes run there), so it takes no lock. Bounded: at most MAX_GROUPS
groups and MAX_CONSUMERS_PER_GROUP consumers each (past them the one seen longest ago goes); a lookup
drops what is no longer connected.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Scope

# How long a client counts as connected after its last request ended.
CONNECTED_MS = 60_000
MAX_GROUPS = 10_000
MAX_CONSUMERS_PER_GROUP = 256
MAX_TOPICS_PER_CONSUMER = 32
USER_AGENT_CHARS = 120


@dataclass(slots=True)
class Consumer:
    address: str
    user_agent: str
    first_seen_ms: int
    last_seen_ms: int
    requests: int = 0  # requests answered
    under_way: int = 0  # requests being served now (a held receive or pull counts until it is answered)
    topics: set[str] = field(default_factory=set)

    def connected(self, now_ms: int) -> bool:
        return self.under_way > 0 or now_ms - self.last_seen_ms < CONNECTED_MS

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "user_agent": self.user_agent,
            "first_seen_ms": self.first_seen_ms,
            "last_seen_ms": self.last_seen_ms,
            "requests": self.requests,
            "waiting": self.under_way > 0,
            "topics": sorted(self.topics),
        }


def _now_ms() -> int:
    return int(time.time() * 1000)


class ConsumerRegistry:
    def __init__(self) -> None:
        self._groups: dict[str, dict[tuple[str, str], Consumer]] = {}

    def begin(self, group: str, topic: str, scope: Scope) -> Consumer:
        """A request of a consumer of `group` starts; call `end` with what it returns when it is answered."""
        now = _now_ms()
        client = scope.get("client")
        address = client[0] if client else "unknown"
        user_agent = ""
        for name, value in scope["headers"]:
            if name == b"user-agent":
                user_agent = value.decode("latin-1")[:USER_AGENT_CHARS]
                break
        consumers = self._groups.get(group)
        if consumers is None:
            if len(self._groups) >= MAX_GROUPS:
                self._drop_idle_groups(now)
            consumers = self._groups.setdefault(group, {})
        key = (address, user_agent)
        consumer = consumers.get(key)
        if consumer is None:
            if len(consumers) >= MAX_CONSUMERS_PER_GROUP:
                oldest = min(consumers, key=lambda k: consumers[k].last_seen_ms)
                del consumers[oldest]
            consumer = consumers[key] = Consumer(address, user_agent, now, now)
        if len(consumer.topics) < MAX_TOPICS_PER_CONSUMER:
            consumer.topics.add(topic)
        consumer.under_way += 1
        return consumer

    @staticmethod
    def end(consumer: Consumer) -> None:
        consumer.under_way -= 1
        consumer.requests += 1
        consumer.last_seen_ms = _now_ms()

    def connected(self, group: str) -> list[dict[str, Any]]:
        """The group's connected consumers, most recently seen first."""
        consumers = self._groups.get(group)
        if not consumers:
            return []
        now = _now_ms()
        for key in [k for k, c in consumers.items() if not c.connected(now)]:
            del consumers[key]
        if not consumers:
            del self._groups[group]
            return []
        return [c.to_json() for c in sorted(consumers.values(), key=lambda c: -c.last_seen_ms)]

    def _drop_idle_groups(self, now: int) -> None:
        for group in [g for g, cs in self._groups.items() if not any(c.connected(now) for c in cs.values())]:
            del self._groups[group]
        while len(self._groups) >= MAX_GROUPS:  # all connected: the first seen goes
            del self._groups[next(iter(self._groups))]
