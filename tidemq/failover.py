"""Following a broker group's failover: which refusals are retried, how long to wait, and where to send next.

A cluster answers writes with 503 while a group elects a master or lacks in-sync replicas:
`NO_MASTER` and `NOT_ENOUGH_REPLICAS` (nothing stored) and `FORWARD_FAILED` (the broker that took
the request could not reach the owner: whether that stored it is unknown, so a retried produce may
be stored twice; consumers deduplicate by key, as with RocketMQ). Those are retried, with a pause
drawn between half and all of a backoff that doubles from `retry_backoff_min_s` to
`retry_backoff_max_s`, until `retry_total_s` has passed since the call began (then the last error is
raised). In a cluster, each retry of a call that names a topic first re-reads the topic's route
(`GET /v1/topics/{topic}/route`) and sends to the master it names (the first group's, by name),
and a broker that refuses the connection (nothing was sent) is retried through another broker of
the route. A standalone broker answers the route with 404 NOT_FOUND: the client then reads no route
again and retries where it sends. Every other error is raised at once.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import orjson

from tidemq.errors import ConnectFailed, ProblemError, TidemqClientError
from tidemq.http_wire import Request, Response, path

RETRIED_CODES = frozenset({"NO_MASTER", "FORWARD_FAILED", "NOT_ENOUGH_REPLICAS"})
# A request path naming a topic: /v1/topics/{topic}/... and /v1/groups/{group}/topics/{topic}/...
TOPIC_PATH = re.compile(r"^/v1/(?:groups/[^/]+/)?topics/([^/?]+)")
# Brokers learned from routes that a client keeps connections to, at most (each has its own pool).
MAX_KNOWN_BROKERS = 64


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    backoff_min_s: float
    backoff_max_s: float
    total_s: float

    def check(self) -> RetryPolicy:
        if not 0 < self.backoff_min_s <= self.backoff_max_s:
            raise ValueError(f"retry backoffs must be 0 < min <= max, not {self.backoff_min_s} and {self.backoff_max_s}")
        if self.total_s < 0:
            raise ValueError(f"retry_total_s must be >= 0, not {self.total_s}")
        return self


class Routes:
    """What a client learned of a cluster: whether it is one, and each topic's master to send to."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.cluster: bool | None = None  # None until a route was read
        self.masters: dict[str, str] = {}  # topic -> the master its route named last
        self.known: list[str] = [base_url]  # brokers to read routes from, and to send to when one refuses connections

    def target(self, topic: str | None) -> str:
        return self.masters.get(topic, self.base_url) if topic is not None else self.base_url

    def learn(self, topic: str, response: Response) -> None:
        if response.status == 404 and b"TOPIC_NOT_FOUND" not in response.body:
            self.cluster = False  # not a cluster (the route answers only there)
            return
        if response.status != 200:
            return
        self.cluster = True
        try:
            groups: list[dict[str, Any]] = orjson.loads(response.body)["groups"]
            masters = [str(g["master"]) for g in groups if g.get("master")]
            brokers = masters + [str(s) for g in groups for s in g.get("slaves", [])]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        for url in brokers:
            if url not in self.known and len(self.known) < MAX_KNOWN_BROKERS:
                self.known.append(url)
        if masters:
            self.masters[topic] = masters[0]
        else:
            self.masters.pop(topic, None)


class Attempt:
    """One call's tries: where the next goes, and whether (and after what pause) it is retried."""

    def __init__(self, request: Request, routes: Routes, policy: RetryPolicy, rng: random.Random) -> None:
        match = TOPIC_PATH.match(request.path)
        self.topic = unquote(match.group(1)) if match is not None else None
        self.routes = routes
        self.policy = policy
        self.rng = rng
        self.deadline = time.monotonic() + policy.total_s
        self.backoff = policy.backoff_min_s
        self.target = routes.target(self.topic)
        self.tries = 1

    def pause_before_retry(self, error: TidemqClientError) -> float | None:
        """Seconds to wait before the next try; None when `error` is not retried or no time is left."""
        refused = isinstance(error, ProblemError) and error.status == 503 and error.code in RETRIED_CODES
        unreachable = isinstance(error, ConnectFailed) and self.routes.cluster is True and len(self.routes.known) > 1
        if not refused and not unreachable:
            return None
        pause = self.rng.uniform(self.backoff / 2, self.backoff)
        if time.monotonic() + pause > self.deadline:
            return None
        self.backoff = min(self.backoff * 2, self.policy.backoff_max_s)
        self.tries += 1
        if unreachable:
            self.routes.masters.pop(self.topic or "", None)
            known = self.routes.known
            self.target = known[(known.index(self.target) + 1) % len(known)] if self.target in known else known[0]
        return pause

    def route_request(self) -> Request | None:
        """The route to read before the next try; None when there is none to read (no topic, or not a cluster)."""
        if self.topic is None or self.routes.cluster is False:
            return None
        return Request("GET", path("v1", "topics", self.topic, "route"))

    def route_sources(self) -> list[str]:
        """Brokers to ask for the route, the next target first."""
        return [self.target, *(u for u in self.routes.known if u != self.target)]

    def learn(self, response: Response) -> None:
        assert self.topic is not None
        self.routes.learn(self.topic, response)
        self.target = self.routes.target(self.topic)

    def succeeded(self) -> None:
        """The call was answered: a retried call's topic keeps going where it was answered (a broker the route named)."""
        if self.tries > 1 and self.topic is not None and self.target != self.routes.base_url:
            self.routes.masters[self.topic] = self.target
