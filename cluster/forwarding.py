"""Forwarder: the ASGI layer that lets any broker of a cluster accept any request (RocketMQ 5's proxy role).

A request is served here when this broker can answer it: reads of a topic its group holds (a slave
serves reads too), and writes when it is its group's master. Otherwise it is forwarded, once, to the
master of the group that owns it (cluster/routing.py), and the owner's reply is relayed as it comes
(status, headers and body: whole, or, for an event stream, as it comes). A forwarded request carries `tidemq-forwarded-by`
and is always served where it arrives, so no request travels more than one hop; a stale route then
gets the owner's own answer (for example 403 NOT_MASTER), never a loop.

Writes are POST, PUT, PATCH and DELETE; writes that name no topic go to this broker's own master;
reads of another group go to its master, or to any of its brokers while it has none. A queue path
`/v1/topics/{topic}/queues/{broker_name}:{queue_id}/...` names one group's queue of a topic that
spans groups: it is served by that group (locally when it is this broker's), as `/queues/{queue_id}`.
Requests for a topic spanning groups that name no queue are spread or merged over its groups by
cluster/spanning.py, and so are acks, whose receipt handles name their group. The first write
of a topic no group holds (a produce, or its creation) claims it for this broker's group in etcd
first (cluster/topic_claims.py), or goes to the group whose claim came first; 503
CLUSTER_UNAVAILABLE when etcd does not answer then.
Bounded: bodies up to `max_forward_body_bytes` (413 BODY_TOO_LARGE past it), at most
`max_forwards_in_flight` forwards at once and each within `forward_timeout_ms` plus its `wait_ms`
(503 FORWARD_FAILED otherwise, also when the owner does not answer); a write for a group with no
master now is 503 NO_MASTER.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from urllib.parse import parse_qs, unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cluster.asgi_replay import serve_captured
from cluster.etcd_client import EtcdError
from cluster.forward_pools import ForwardPools
from cluster.node import ClusterNode
from cluster.routing import master_address, owner_group, read_address
from cluster.settings import ClusterSettings
from cluster.spanning import SpanningRequests
from cluster.topic_claims import TopicClaims
from tidemq import AsyncPool, HttpRequest, TransportError

FORWARDED_HEADER = b"tidemq-forwarded-by"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# /v1/topics/{topic}/... and /v1/groups/{group}/topics/{topic}/...
TOPIC_PATH = re.compile(r"^/v1/(?:groups/[^/]+/)?topics/([^/]+)(/.*)?$")
# A queue of a topic spanning groups: /v1/topics/{topic}/queues/{broker_name}:{queue_id}[/...].
QUALIFIED_QUEUE = re.compile(r"^(/v1/topics/[^/]+/queues/)([A-Za-z0-9][A-Za-z0-9._-]{0,63}):(\d+)(/.*)?$")
QUALIFIED_RAW = re.compile(rb"^(/v1/topics/[^/]+/queues/)([A-Za-z0-9][A-Za-z0-9._-]{0,63}):(\d+)(/.*)?$")
# Headers not passed on (hop-by-hop, or recomputed by the client library).
DROPPED_REQUEST_HEADERS = frozenset({b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"upgrade"})
DROPPED_REPLY_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})
# Longest a relayed event stream may be silent (the owner sends a heartbeat every stream_heartbeat_ms, 15 s).
STREAM_IDLE_S = 60.0
# Longest wait_ms a forwarded request may add to its timeout (the owner caps it with max_wait_ms anyway).
MAX_WAIT_ALLOWANCE_MS = 300_000

# The paths, after /v1/topics/{topic}, whose POST is a produce (and may create the topic).
PRODUCE_TAILS = frozenset({"/messages", "/messages/batch"})
NO_MASTER = "the broker group that owns this request has no master now (an election is under way); retry shortly"
CLAIM_FAILED = "etcd did not answer, so no broker group can be chosen for a new topic; retry shortly"

# (code, detail, path) -> the problem reply (app/problems.py's table).
ProblemReply = Callable[[str, str, str], ASGIApp]
# (topic, explicit creation) -> whether a write may create it here (a valid name; auto-creation on, or a PUT).
NewTopicCheck = Callable[[str, bool], bool]


# Paths of consumer state: served by the group's master, reads included (`Forwarding.target`).
CONSUMER_STATE_PREFIX = "/v1/groups/"
# The reply header naming who served a consumer-state request: "{broker id}; role={role}; epoch={epoch}" (the
# broker's role and epoch as its reply starts). Group consumption (`/v1/groups/{group}/topics/...`: receive, ack)
# is a hot route and goes without it.
SERVED_BY_HEADER = b"tidemq-served-by"


class Forwarder:
    def __init__(
        self, app: ASGIApp, node: ClusterNode, settings: ClusterSettings, problem: ProblemReply, new_topic_check: NewTopicCheck
    ) -> None:
        self.app = app
        self.node = node
        self.settings = settings
        self.problem = problem
        self.new_topic_check = new_topic_check
        self.claims = TopicClaims(node.etcd, node.keys, node.group_name)
        self.spanning = SpanningRequests(self)
        self.in_flight = 0
        self.pools = ForwardPools(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        group = None
        qualified = QUALIFIED_QUEUE.match(scope["path"])
        if qualified is not None:
            # "/queues/{broker_name}:{queue_id}/...": that group's queue; its brokers know it as "/queues/{queue_id}".
            group = qualified.group(2)
            raw = scope.get("raw_path") or scope["path"].encode()
            scope = {**scope, "path": QUALIFIED_QUEUE.sub(r"\1\3\4", scope["path"]), "raw_path": QUALIFIED_RAW.sub(rb"\1\3\4", raw)}
        if any(name == FORWARDED_HEADER for name, _ in scope["headers"]):
            if scope["path"].startswith(CONSUMER_STATE_PREFIX) and not self._serves_consumer_state(scope["method"]):
                # Forwarded here as to the master, but this broker is not one (yet, or any more, or is fenced): its
                # consumer state may be behind the group's, so it answers nothing of it; the client asks again.
                return await self.problem("NO_MASTER", NO_MASTER, scope["path"])(scope, receive, send)
            await self.serve_here(scope, receive, send)
            return
        if group is None:
            if await self.spanning.handle(scope, receive, send):
                return
            group = await self.owner(scope["method"], scope["path"])
            if group is None:
                return await self.problem("CLUSTER_UNAVAILABLE", CLAIM_FAILED, scope["path"])(scope, receive, send)
        await self.to_group(group, scope, receive, send)

    async def owner(self, method: str, path: str) -> str | None:
        """The group a request belongs to (module docstring); None when a new topic's claim cannot be made."""
        own = self.node.group_name
        match = TOPIC_PATH.match(path)
        if match is None or match.group(2) == "/route":
            return own
        topic = unquote(match.group(1))
        group = owner_group(self.node.view, topic) or self.claims.known(topic)
        if group is not None:
            return group
        creates = (method == "PUT" and match.group(2) is None) or (method == "POST" and match.group(2) in PRODUCE_TAILS)
        if not creates or not self.new_topic_check(topic, method == "PUT"):
            return own  # nothing is created: served here, which answers the refusal or TOPIC_NOT_FOUND
        try:
            return await asyncio.to_thread(self.claims.claim, topic)
        except EtcdError:
            return None

    async def to_group(self, group: str, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve here when this broker can, else forward to the group's master (a read: any of its brokers)."""
        target = self.target(scope["method"], group, scope["path"])
        if target is None:
            await self.serve_here(scope, receive, send)
        elif target == "":
            await self.problem("NO_MASTER", NO_MASTER, scope["path"])(scope, receive, send)
        else:
            await self.forward(target, scope, receive, send)

    async def serve_here(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request on this broker; a consumer-state reply names it, its role and epoch (SERVED_BY_HEADER)."""
        path = scope["path"]
        if not path.startswith(CONSUMER_STATE_PREFIX) or "/topics/" in path:
            await self.app(scope, receive, send)
            return
        node = self.node

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                served_by = f"{node.broker_id}; role={node.role}; epoch={node.epoch()}".encode("latin-1")
                message = {**message, "headers": [*message.get("headers", []), (SERVED_BY_HEADER, served_by)]}
            await send(message)

        await self.app(scope, receive, named)

    def target(self, method: str, group: str, path: str = "") -> str | None:
        """The group's base URL for this request; None to serve here; "" when the group has no broker that can.

        Writes go to the master, and so do reads of consumer state (`/v1/groups/...`: offsets, groups): a slave
        applies the master's state records a moment after it holds them, so only the master reads back at
        once what it answered (a commit answered OK is never read lower, whichever broker is asked)."""
        node, view = self.node, self.node.view
        write = method in WRITE_METHODS or path.startswith(CONSUMER_STATE_PREFIX)
        if group == node.group_name and not write:
            return None
        if group == node.group_name and node.role == "master":
            # A write is served here (the store and the fence refuse it if they must); a read of consumer state only
            # while this master holds its lease (ClusterNode.serves_consumer_state).
            return None if method in WRITE_METHODS or node.serves_consumer_state() else ""
        address = master_address(view, group) if write else read_address(view, group)
        if address == node.broker_id:
            # This broker's view still names it master (it is taking over, or was deposed): a write is served here,
            # which refuses it; a read of consumer state waits for a master that serves it.
            return None if not write or method in WRITE_METHODS or node.serves_consumer_state() else ""
        return address or ""

    def _serves_consumer_state(self, method: str) -> bool:
        """Whether a consumer-state request forwarded here as to the group's master is answered here."""
        node = self.node
        if method in WRITE_METHODS:
            return node.role == "master" and node.may_accept_puts()
        return node.serves_consumer_state()

    async def call(self, group: str, scope: Scope, body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """One request to a group, served here or there, its whole reply kept: for the replies SpanningRequests merges."""
        target = self.target(scope["method"], group, scope["path"])
        if target == "":
            return 503, [], b""
        if target is None:
            return await serve_captured(self.app, self._marked(scope), body)
        timeout = (self.settings.forward_timeout_ms + self._wait_ms(scope.get("query_string", b""))) / 1000.0
        self.node.forwarded_total += 1
        try:
            pool = await self.pools.pool(target)
            reply = await pool.request(self._request(scope, body), timeout)
        except TransportError:
            self.node.forward_failed_total += 1
            return 503, [], b""
        return reply.status, _reply_headers(reply.headers), reply.body

    async def forward(self, target: str, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if self.in_flight >= self.settings.max_forwards_in_flight:
            self.node.forward_failed_total += 1
            await self.problem("FORWARD_FAILED", f"{self.in_flight} forwarded requests are in flight; retry shortly", path)(
                scope, receive, send
            )
            return
        body = await self._read_body(receive)
        if body is None:
            detail = f"a forwarded body is at most {self.settings.max_forward_body_bytes} bytes"
            await self.problem("BODY_TOO_LARGE", detail, path)(scope, receive, send)
            return
        timeout = (self.settings.forward_timeout_ms + self._wait_ms(scope.get("query_string", b""))) / 1000.0
        self.in_flight += 1
        self.node.forwarded_total += 1
        try:
            pool = await self.pools.pool(target)
            if _is_stream(scope):
                await self._relay_stream(pool, self._request(scope, body), send)
            else:
                reply = await pool.request(self._request(scope, body), timeout)
                headers = [*_reply_headers(reply.headers), (b"content-length", str(len(reply.body)).encode())]
                await send({"type": "http.response.start", "status": reply.status, "headers": headers})
                await send({"type": "http.response.body", "body": reply.body, "more_body": False})
        except _StreamCut:
            self.node.forward_failed_total += 1  # the reply was under way: the connection ends short, as the owner's did
        except TransportError as exc:
            self.node.forward_failed_total += 1
            detail = f"{target} did not answer ({type(exc).__name__}); retry shortly"
            await self.problem("FORWARD_FAILED", detail, path)(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _relay_stream(self, pool: AsyncPool, request: HttpRequest, send: Send) -> None:
        """An event stream, relayed piece by piece while it lasts (its heartbeats keep the idle timeout away)."""
        async with pool.stream(request, STREAM_IDLE_S) as (head, pieces):
            await send({"type": "http.response.start", "status": head.status, "headers": _reply_headers(head.headers)})
            try:
                async for piece in pieces:
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
            except TransportError as exc:
                raise _StreamCut from exc
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _request(self, scope: Scope, body: bytes) -> HttpRequest:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k not in DROPPED_REQUEST_HEADERS}
        headers[FORWARDED_HEADER.decode()] = self.node.broker_id
        query = scope.get("query_string", b"")
        path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        return HttpRequest(scope["method"], path + (("?" + query.decode("latin-1")) if query else ""), headers=headers, body=body)

    def _marked(self, scope: Scope) -> Scope:
        return {**scope, "headers": [*scope["headers"], (FORWARDED_HEADER, self.node.broker_id.encode())]}

    async def read_body(self, receive: Receive) -> bytes | None:
        """The whole request body; None past `max_forward_body_bytes`."""
        return await self._read_body(receive)

    async def _read_body(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message: Message = await receive()
            if message["type"] == "http.disconnect":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.settings.max_forward_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    def _wait_ms(query: bytes) -> int:
        values = parse_qs(query.decode("latin-1")).get("wait_ms", [])
        try:
            return min(MAX_WAIT_ALLOWANCE_MS, max(0, int(values[0]))) if values else 0
        except ValueError:
            return 0

    async def aclose(self) -> None:
        await self.pools.aclose()


class _StreamCut(Exception):
    """Raised when a relayed stream ends short after its head was sent."""


def _is_stream(scope: Scope) -> bool:
    """An event stream (a receive stream, or a request that accepts only events): relayed as it comes."""
    if scope["path"].endswith("/stream"):
        return True
    return any(k == b"accept" and v.strip() == b"text/event-stream" for k, v in scope["headers"])


def _reply_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items() if k not in DROPPED_REPLY_HEADERS]
