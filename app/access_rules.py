"""What a request needs, decided from its method, its path's segments and (for two routes) one
query parameter, without FastAPI: the access gate runs in front of the hot routes. The query is the
one parse every route reads too (app.query), so the gate judges the values the route serves.

Invariants:
- Every route of the API has a rule here; a path that matches none needs a token (any account),
  so an unauthenticated caller cannot tell a route from a 404.
- HEAD is judged as GET.
- Routes whose resource is known only after a lookup (a message by its offset id, the topics
  of an offset commit's body) need a token here and are checked again by the route itself
  (`app.access_check`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.acl import CREATE, PUB, SUB


@dataclass(frozen=True, slots=True)
class Need:
    """OPEN: no token. Otherwise a known account, plus admin, or `bits` on the topic/group."""

    open: bool = False
    admin: bool = False
    bits: int = 0
    topic: str | None = None
    group: str | None = None
    metrics: bool = False  # open when metrics_public is set
    audited: bool = False  # an administrative action open to a right other than admin (creating a topic): audited as admin ones are


OPEN = Need(open=True)
ANY_ACCOUNT = Need()
ADMIN = Need(admin=True)
METRICS = Need(metrics=True)
OPEN_PATHS = {"/healthz", "/readyz", "/console"}
# Static files holding no data (the console's and Swagger UI's assets): served without a token.
OPEN_PREFIXES = ("/console/", "/docs/assets/")
# Single-resource routes that only an administrator may call, by (method, path).
ADMIN_PATHS = {
    ("GET", "/v1/topics"),
    ("GET", "/v1/groups"),
    ("GET", "/v1/store"),
    ("GET", "/v1/store/files"),
    ("GET", "/v1/timers"),
    ("GET", "/v1/schedule"),
    ("GET", "/v1/push"),
}
GROUP_ACTIONS = {"receive", "ack", "invisible", "stream"}


def need_of(method: str, path: str, query: Mapping[str, str]) -> Need:
    """The requirement of one request (see the module's invariants)."""
    if method == "HEAD":
        method = "GET"
    if path in OPEN_PATHS or (path.startswith(OPEN_PREFIXES) and ".." not in path):
        return OPEN  # no ".." : an open prefix never vouches for a path that could name something else
    if path == "/metrics":
        return METRICS
    if (method, path) in ADMIN_PATHS or path.startswith(("/v1/admin/", "/v1/producer-groups/")) or path == "/v1/admin":
        return ADMIN
    if path.startswith("/v1/topics/"):
        return _topic_need(method, path.split("/"), query)
    if path.startswith("/v1/groups/"):
        return _group_need(method, path.split("/"), query)
    if path.startswith("/v1/transactions/"):
        return ADMIN  # resolving a transaction: admin (see docs/security.md)
    return ANY_ACCOUNT  # /v1/messages/{id} (checked by the route), /docs, /openapi.json, unknown paths


def _topic_need(method: str, parts: list[str], query: Mapping[str, str]) -> Need:
    # "", "v1", "topics", topic, ...
    topic = parts[3]
    if not topic:
        return ANY_ACCOUNT
    if len(parts) == 4:
        if method == "GET":
            return Need(bits=0, topic=topic)  # any permission on the topic, checked as "not DENY" below
        if method == "PUT":
            # Creating needs CREATE on the topic (admin has every right); changing an existing topic needs
            # admin, which the route checks once it knows whether the topic exists (app.routes_topics).
            return Need(bits=CREATE, topic=topic, audited=True)
        return ADMIN  # DELETE
    if len(parts) == 5 and parts[4] == "route" and method == "GET":
        return Need(bits=0, topic=topic)  # like GET /v1/topics/{topic}: any permission on the topic
    if len(parts) == 5 and parts[4] == "messages":
        return Need(bits=PUB, topic=topic) if method == "POST" else Need(bits=SUB, topic=topic)
    if len(parts) == 6 and parts[4] == "messages" and parts[5] == "batch":  # produceBinaryBatch
        return Need(bits=PUB, topic=topic)
    if parts[4] == "queues" and (len(parts) == 7 or (len(parts) == 8 and parts[6:] == ["messages", "batch"])):
        group = query.get("group") if parts[6] == "messages" else None
        return Need(bits=SUB, topic=topic, group=group or None)
    return ANY_ACCOUNT


def _group_need(method: str, parts: list[str], query: Mapping[str, str]) -> Need:
    # "", "v1", "groups", group, ...
    group = parts[3]
    if not group:
        return ANY_ACCOUNT
    if len(parts) == 4:
        return ADMIN if method != "GET" else Need(bits=SUB, group=group)
    if len(parts) == 5 and parts[4] == "offsets":
        # GET names the topic in the query; PUT in the body, which the route checks.
        topic = query.get("topic") if method == "GET" else None
        return Need(bits=SUB, topic=topic or None, group=group)
    if len(parts) == 7 and parts[4] == "topics" and parts[6] in GROUP_ACTIONS and parts[5]:
        return Need(bits=SUB, topic=parts[5], group=group)
    if (len(parts) == 5 and parts[4] == "push") or (len(parts) == 6 and parts[4:] == ["dlq", "redrive"]):
        return Need(bits=SUB, group=group)  # a push subscription's topic is in its body or its record: the route checks it
    if len(parts) == 6 and parts[4:] == ["dead-letters", "resend"]:
        return ADMIN  # puts messages into the group's retry topic: an operator's action, audited
    return ANY_ACCOUNT
