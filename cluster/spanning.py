"""SpanningRequests: requests for a topic held by several broker groups, spread or merged over them.

RocketMQ 5's proxy spreads a topic's sends over its brokers' queues and lets a consumer pop from
each broker in turn; these rules do the same for one HTTP address (docs/cluster.md):
- a produce goes to the groups in turn (those with a master first); one that asks for a queue or
  an order (`queue_id` or `sharding_key` in its query or JSON body) goes to the first group by
  name, whose queues plain queue ids name, so one sharding key stays in one queue;
- a receive, and an event stream, go to the groups in turn: each serves its own share;
- a key query asks every group and merges their answers (ordered by store time, at most `max`);
- a lookup by offset message id, which names no topic, is tried here first, then at each other
  group until one has the message;
- acks and invisible-time changes of such a topic go by their receipt handles, which name the
  group that issued them (`{broker_name}:{handle}` in cluster mode): an ack naming several groups is split, each
  part sent to its group, and the results put back in the request's order. A handle's result is
  its group's status, or the code of the problem its group answered with.
Every sub-request carries the forwarded header, so each is served where it lands.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import orjson
from starlette.types import Receive, Scope, Send

from cluster.asgi_replay import replay

if TYPE_CHECKING:
    from cluster.forwarding import Forwarder

GROUP_ACTION = re.compile(r"^/v1/groups/[^/]+/topics/([^/]+)/(receive|ack|invisible|stream)$")
TOPIC_MESSAGES = re.compile(r"^/v1/topics/([^/]+)/messages(/batch)?$")
MESSAGE_ID = re.compile(r"^/v1/messages/[^/]+$")
# Field names whose presence in a produce body asks for a queue or an order (a false match only
# sends the produce to the first group, which is always right, never wrong).
ORDER_MARKS = (b'"queue_id"', b'"sharding_key"')
ORDER_PARAMS = ("queue_id", "sharding_key")
DEFAULT_QUERY_MAX = 32
JSON_HEADERS = [(b"content-type", b"application/json")]

Reply = tuple[int, list[tuple[bytes, bytes]], bytes]


class SpanningRequests:
    def __init__(self, forwarder: Forwarder) -> None:
        self.forwarder = forwarder
        self._turn = itertools.count()

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Serve the request when a rule above applies; False when the Forwarder's plain rule does."""
        method, path = scope["method"], scope["path"]
        action = GROUP_ACTION.match(path)
        if action is not None:
            groups = self._spanned(unquote(action.group(1)))
            if not groups or method != ("GET" if action.group(2) == "stream" else "POST"):
                return False  # a topic of one group: its handles are that group's, the plain rule sends them there
            if action.group(2) in ("ack", "invisible"):
                await self._by_handle(action.group(2), scope, receive, send)
                return True
            await self.forwarder.to_group(self._next(groups), scope, receive, send)
            return True
        messages = TOPIC_MESSAGES.match(path)
        if messages is not None:
            groups = self._spanned(unquote(messages.group(1)))
            if groups and method == "POST":
                await self._produce(groups, scope, receive, send)
                return True
            if groups and method == "GET" and messages.group(2) is None:
                await self._query(groups, scope, send)
                return True
            return False
        if method == "GET" and MESSAGE_ID.match(path):
            await self._lookup(scope, send)
            return True
        return False

    def _spanned(self, topic: str) -> list[str]:
        holders = self.forwarder.node.view.holders(topic)
        return holders if len(holders) > 1 else []

    def _next(self, groups: list[str]) -> str:
        """The next group in turn that has a broker to take a write now (else the next in turn, which answers NO_MASTER)."""
        start = next(self._turn)
        for i in range(len(groups)):
            group = groups[(start + i) % len(groups)]
            if self.forwarder.target("POST", group) != "":
                return group
        return groups[start % len(groups)]

    async def _produce(self, groups: list[str], scope: Scope, receive: Receive, send: Send) -> None:
        body = await self._body(scope, receive, send)
        if body is None:
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        ordered = any(name in query for name in ORDER_PARAMS) or any(mark in body for mark in ORDER_MARKS)
        group = groups[0] if ordered else self._next(groups)
        await self.forwarder.to_group(group, scope, replay(body, receive), send)

    async def _query(self, groups: list[str], scope: Scope, send: Send) -> None:
        values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("max", [])
        if len(values) > 1 or (values and not (values[0].isascii() and values[0].isdigit())):
            await self.forwarder.to_group(groups[0], scope, replay(b""), send)  # it answers the bad parameter
            return
        most = int(values[0]) if values else DEFAULT_QUERY_MAX
        replies = await asyncio.gather(*(self.forwarder.call(group, scope, b"") for group in groups))
        found: list[dict[str, Any]] = []
        for status, headers, body in replies:
            if status != 200:
                await self._relay(scope, send, (status, headers, body))
                return
            found.extend(orjson.loads(body)["messages"])
        found.sort(key=lambda m: (m.get("store_timestamp", 0), m.get("commitlog_offset", 0)))
        await _send(send, 200, JSON_HEADERS, orjson.dumps({"messages": found[:most]}))

    async def _lookup(self, scope: Scope, send: Send) -> None:
        node = self.forwarder.node
        first = await self.forwarder.call(node.group_name, scope, b"")
        if first[0] == 404:
            for group in sorted(g for g in node.view.groups if g != node.group_name):
                reply = await self.forwarder.call(group, scope, b"")
                if reply[0] == 200:
                    await self._relay(scope, send, reply)
                    return
        await self._relay(scope, send, first)

    async def _by_handle(self, action: str, scope: Scope, receive: Receive, send: Send) -> None:
        body = await self._body(scope, receive, send)
        if body is None:
            return
        own = self.forwarder.node.group_name
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
        handles = _handles(doc, action)
        if handles is None:
            await self.forwarder.to_group(own, scope, replay(body, receive), send)  # it answers the bad body
            return
        parts: dict[str, list[int]] = {}
        for i, handle in enumerate(handles):
            parts.setdefault(self._issuer(handle), []).append(i)
        if len(parts) == 1:
            await self.forwarder.to_group(next(iter(parts)), scope, replay(body, receive), send)
            return
        groups = list(parts)
        calls = [self.forwarder.call(g, scope, orjson.dumps({"receipt_handles": [handles[i] for i in parts[g]]})) for g in groups]
        results: list[dict[str, str]] = [{} for _ in handles]
        for group, (status, _, reply) in zip(groups, await asyncio.gather(*calls), strict=True):
            answered = orjson.loads(reply)["results"] if status == 200 else None
            for n, i in enumerate(parts[group]):
                results[i] = answered[n] if answered is not None else {"receipt_handle": handles[i], "status": _code(reply)}
        await _send(send, 200, JSON_HEADERS, orjson.dumps({"results": results}))

    def _issuer(self, handle: str) -> str:
        """The group a handle names, when the cluster knows it; else this broker's (which refuses a foreign one)."""
        name, sep, _ = handle.partition(":")
        groups = self.forwarder.node.view.groups
        return name if sep and name in groups else self.forwarder.node.group_name

    async def _body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        body = await self.forwarder.read_body(receive)
        if body is None:
            detail = f"a forwarded body is at most {self.forwarder.settings.max_forward_body_bytes} bytes"
            await self.forwarder.problem("BODY_TOO_LARGE", detail, scope["path"])(scope, replay(b""), send)
        return body

    async def _relay(self, scope: Scope, send: Send, reply: Reply) -> None:
        status, headers, body = reply
        if status == 503 and not body:
            detail = "a broker group of this topic did not answer; retry shortly"
            await self.forwarder.problem("FORWARD_FAILED", detail, scope["path"])(scope, replay(b""), send)
            return
        kept = [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"transfer-encoding", b"connection")]
        await _send(send, status, kept, body)


def _handles(doc: Any, action: str) -> list[str] | None:
    if not isinstance(doc, dict):
        return None
    if action == "invisible":
        handle = doc.get("receipt_handle")
        return [handle] if isinstance(handle, str) else None
    handles = doc.get("receipt_handles")
    if not isinstance(handles, list) or not handles or not all(isinstance(h, str) for h in handles):
        return None
    return handles


def _code(reply: bytes) -> str:
    """The problem code of a refused part of an ack; FORWARD_FAILED when its group did not answer."""
    try:
        doc = orjson.loads(reply)
    except orjson.JSONDecodeError:
        return "FORWARD_FAILED"
    return str(doc.get("code", "FORWARD_FAILED")) if isinstance(doc, dict) else "FORWARD_FAILED"


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
