"""HotRoutes: the server's outermost ASGI callable; produce, pull, receive and ack served without FastAPI.

Matching a path through FastAPI's included routers, solving an endpoint's parameters and passing
through Starlette's middleware stack cost more than the store's put on these paths, and so did a
stack of ASGI wrappers (counting, query, body limit, start-up gate) each with its own coroutine
frame and send wrapper. So this one callable, per HTTP request: counts it (app.http_requests:
`RequestStats`, the access log), parses its query once (app.query: 400 REQUEST_INVALID for a bad
one), and serves a hot route itself: the start-up gate (503 STARTING), the body limit (413
BODY_TOO_LARGE before reading; a chunked body cut at the limit; 408 when the connection marked
it late), the handler the FastAPI route calls too, and the reply written as two ASGI messages.
Every other request goes on to the FastAPI app (whose own middleware gates it the same way).

Invariants:
- Only `POST /v1/topics/{topic}/messages`, `GET /v1/topics/{topic}/queues/{queue_id}/messages`
  (and both with `/batch` appended: produceBinaryBatch, pullBatch),
  `POST /v1/groups/{group}/topics/{topic}/receive` and `.../ack` with non-empty segments, and
  `GET` and `HEAD /healthz` (a constant reply), are served here.
- With a guard (the ACL gate, the cluster's forwarder: `guard`), every request passes the
  guard after being counted and its query parsed, and the guard's innermost app is `dispatch`,
  which serves the hot routes the same way; a request the connection serves itself
  (`direct_handler`, `answer`) is judged by the ACL gate's `judge` when the gate is the whole guard
  and not served that way otherwise; so nothing reaches a handler unjudged.
- A request served here carries its route template in `scope[ROUTE_KEY]` (app.http_requests).
- A handler gets a `HotRequest` (its `path_params` are strings; `body()` reads through the body
  limit) and its errors go through the app's one problem mapping, so both ways in give the same
  answers.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.datastructures import Headers
from starlette.requests import Request, empty_send
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.access_gate import AccessGate, audit_answer
from app.acl import Account
from app.body_limit import BODY_TIMED_OUT, NO_BODY, BodyTimeout, BodyTooLarge, body_limit
from app.held_reply import HELD_REPLY_KEY, HeldReply
from app.http_requests import METHODS, ROUTE_KEY, RequestStats, log_request, route_of
from app.problems import ProblemError, ProblemReply
from app.query import QUERY_KEY, parse_query
from app.responses import is_plain
from app.startup import SERVED_WHILE_STARTING

Handler = Callable[[Request], Awaitable[Response]]
HEALTH_PATH = "/healthz"
_HEALTH = b'{"status":"ok"}'  # what routes_status's /healthz answers, byte for byte
HEALTH_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-length", str(len(_HEALTH)).encode()), (b"content-type", b"application/json")],
}
HEALTH_BODY = {"type": "http.response.body", "body": _HEALTH}
HEAD_BODY = {"type": "http.response.body", "body": b""}  # HEAD: the GET's headers, no body
# The route templates of the requests served here: the FastAPI routes' paths.
PRODUCE_ROUTE = "/v1/topics/{topic}/messages"
PULL_ROUTE = "/v1/topics/{topic}/queues/{queue_id}/messages"
PRODUCE_BATCH_ROUTE = PRODUCE_ROUTE + "/batch"
PULL_BATCH_ROUTE = PULL_ROUTE + "/batch"
GROUP_ROUTES = {"receive": "/v1/groups/{group}/topics/{topic}/receive", "ack": "/v1/groups/{group}/topics/{topic}/ack"}
STARTING_DETAIL = "the store is being loaded and recovered; see /readyz for the progress"


class ErrorMapper(Protocol):
    """Exceptions -> problem replies (app.server.ErrorMapping): as an exception handler, and at once."""

    async def __call__(self, request: Request, exc: Exception) -> Response: ...

    def answer(self, request: Request, exc: BaseException) -> Response: ...


@dataclass(frozen=True, slots=True)
class HotHandlers:
    """The handlers the hot path calls: the same the FastAPI routes call."""

    produce: Handler
    produce_batch: Handler
    pull: Handler
    pull_batch: Handler
    receive: Handler
    ack: Handler


class HotRequest(Request):
    """What a handler reads of a request served here: the scope, path parameters, headers, the body.

    A Starlette `Request` by type only (the handlers are shared with the FastAPI routes): none of
    its per-request work runs. The constructor sets the scope and nothing else; `body()` reads the
    whole body in one `receive()` when it came with the headers, checked by the body limit the
    hot path decided (`limit` bytes named by `setting`; -1: the Content-Length was checked already)."""

    def __init__(self, scope: Scope, receive: Receive, limit: int, setting: str) -> None:
        self.scope = scope
        self._receive = receive
        self._send = empty_send
        self._stream_consumed = False
        self._form = None
        self._limit = limit
        self._setting = setting
        self._is_disconnected = False

    @classmethod
    def whole(cls, scope: Scope, body: bytes) -> HotRequest:
        """A request whose whole body was read before its handler runs (app.direct_requests)."""
        request = cls(scope, _no_more_messages, -1, "")
        request._body = body
        return request

    @property
    def headers(self) -> Headers:
        headers: Headers | None = getattr(self, "_headers", None)
        if headers is None:
            headers = self._headers = HotHeaders(raw=self.scope["headers"])
        return headers

    async def body(self) -> bytes:
        body: bytes | None = getattr(self, "_body", None)
        if body is None:
            body = self._body = await self._read_body()
        return body

    async def _read_body(self) -> bytes:
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await self._receive()
            if self.scope.get(BODY_TIMED_OUT):
                raise BodyTimeout(self.scope[BODY_TIMED_OUT])
            if message["type"] != "http.request":  # http.disconnect: what arrived is all there is
                self._is_disconnected = True
                break
            chunk = message.get("body", b"")
            if not chunks and not message.get("more_body", False):
                if 0 <= self._limit < len(chunk):
                    raise BodyTooLarge(self._limit, self._setting)
                return bytes(chunk) if type(chunk) is not bytes else chunk  # the common case: the whole body, not copied
            seen += len(chunk)
            if 0 <= self._limit < seen:
                raise BodyTooLarge(self._limit, self._setting)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def receive(self) -> Message:
        """The next ASGI message (a held request watches for `http.disconnect` with it)."""
        return await self._receive()


# Header names asked for, as the raw headers spell them (lower-case latin-1): the handlers ask for a few, by constants.
_HEADER_NAMES: dict[str, bytes] = {}
_MAX_HEADER_NAMES = 256


class HotHeaders(Headers):
    """Starlette's read-only headers with a direct `get` (the handlers' one use: a header or a default)."""

    def get(self, key: str, default: Any = None) -> Any:
        name = _HEADER_NAMES.get(key)
        if name is None:
            name = key.lower().encode("latin-1")
            if len(_HEADER_NAMES) < _MAX_HEADER_NAMES:
                _HEADER_NAMES[key] = name
        for item, value in self._list:
            if item == name:
                return value.decode("latin-1")
        return default


class HotRoutes:
    """The outermost ASGI callable: counting, the query, the hot routes; everything else goes to `app`."""

    def __init__(
        self,
        app: ASGIApp,
        handlers: HotHandlers,
        on_error: ErrorMapper,
        problem: ProblemReply,
        broker: Any,
        stats: RequestStats,
        log_requests: bool,
        max_bytes: int,
        max_json_bytes: int,
        serve_hot: bool = True,
    ) -> None:
        self.app = app
        self.produce = handlers.produce
        self.produce_batch = handlers.produce_batch
        self.pull = handlers.pull
        self.pull_batch = handlers.pull_batch
        self.group_actions = {"receive": handlers.receive, "ack": handlers.ack}
        self.on_error = on_error
        self.problem = problem
        self.broker = broker
        self.stats = stats
        self.log_requests = log_requests
        self.max_bytes = max_bytes
        self.max_json_bytes = max_json_bytes
        self.serve_hot = serve_hot  # False: the hot routes go to the FastAPI app too (settings.hot_routes off)
        # The ACL gate and the forwarder (app.server sets it): every request passes it, `dispatch` innermost.
        self.guard: ASGIApp | None = None
        # The guard when it is the ACL gate alone (no forwarder): requests the connection serves itself
        # (app.direct_requests) are judged by it in `answer`, as the guard judges the others.
        self.gate: AccessGate | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter_ns()
        stats = self.stats
        stats.in_flight += 1
        reply = [500, 0]  # status (500 unless a reply starts), body bytes sent
        try:
            query = scope["query_string"]
            try:
                scope[QUERY_KEY] = parse_query(query) if query else {}
            except ProblemError as e:
                await self._send_problem(e.code, e.detail, scope, receive, _Observed(send, reply))
                return
            if self.guard is None:
                await self._route(scope, receive, send, reply)
            else:
                await self.guard(scope, receive, _Observed(send, reply))
        finally:
            stats.in_flight -= 1
            self.count(scope, reply[0], start, reply[1])

    def count(self, scope: Scope, status: int, start_ns: int, sent: int) -> None:
        """Count an answered request (and log it with the access log on): its route, method, status, time, bytes."""
        duration_ns = time.perf_counter_ns() - start_ns
        route = scope.get(ROUTE_KEY) or route_of(scope)
        method = METHODS.get(scope["method"], "OTHER")
        self.stats.add(route, method, status, duration_ns, sent)
        if self.log_requests:
            log_request(scope, method, route, status, duration_ns, sent)

    def dispatch(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The guard's inner app: the hot routes and the rest, as `__call__` serves them without a guard."""
        return self._route(scope, receive, send, None)

    def _route(self, scope: Scope, receive: Receive, send: Send, reply: list[int] | None) -> Awaitable[None]:
        """What serves the request: a hot route's handler, the health check, or the app (watched when `reply`
        counts). Not a coroutine of its own: the caller awaits what it returns, one frame fewer kept for
        as long as the request is (a held pull's wait)."""
        path: str = scope["path"]
        method: str = scope["method"]
        handler = self._hot_handler(scope, path, method)
        if handler is None and path == HEALTH_PATH and (method == "GET" or method == "HEAD"):
            # The liveness answer, served whatever the store does (also while it loads).
            scope[ROUTE_KEY] = HEALTH_PATH
            if reply is not None:
                reply[0], reply[1] = 200, len(_HEALTH) if method == "GET" else 0
            return _send_health(send, method == "GET")
        if handler is None or not self.serve_hot:
            scope.pop(ROUTE_KEY, None)  # the FastAPI router names the route it matches
            return self.app(scope, receive, send if reply is None else _Observed(send, reply))
        return self._serve(handler, scope, receive, send, reply)

    def direct_handler(self, scope: Scope) -> Handler | None:
        """The handler of a hot route the connection's protocol may serve itself (app.direct_requests), its
        route set in `scope`; None when the request goes the ASGI way: a guard judges requests, the hot routes
        are off, the store is loading, not a hot route, or a body that is chunked or past its limit (a POST
        without a body too: the app's answer)."""
        if (self.guard is not None and self.guard is not self.gate) or not self.serve_hot or self.broker.loading:
            return None
        method = scope["method"]
        handler = self._hot_handler(scope, scope["path"], method)
        if handler is None:
            return None
        limit = body_limit(scope, self.max_bytes, self.max_json_bytes)
        if limit.refusal is not None or limit.limit >= 0 or (limit is NO_BODY and method == "POST"):
            return None
        return handler

    async def answer(self, handler: Handler, scope: Scope, body: bytes) -> Response:
        """The reply to a request whose whole body is at hand (app.direct_requests): its query, the handler,
        the handler's errors mapped; what `__call__` answers the same request with."""
        query = scope["query_string"]
        try:
            scope[QUERY_KEY] = parse_query(query) if query else {}
        except ProblemError as e:
            return self.problem(e.code, e.detail, scope["path"][:200], None)
        audited: Account | None = None
        if self.gate is not None:
            verdict = self.gate.judge(scope)
            if isinstance(verdict, Response):
                return verdict  # refused: the handler never sees the request
            audited = verdict
        request = HotRequest.whole(scope, body)
        try:
            response = await handler(request)
        except Exception as exc:  # mapped like the app's own exception handlers
            response = await self.on_error(request, exc)
        if audited is not None:
            held: HeldReply | None = scope.get(HELD_REPLY_KEY)
            if held is None:
                audit_answer(scope, audited.name, response.status_code)
            else:  # the answer is the held reply's outcome: audited when it is written (DirectRequests.release)
                held.audited = audited.name
        return response

    def error_reply(self, scope: Scope, exc: BaseException) -> Response:
        """The reply `exc` maps to for a request served by the connection (a held reply's outcome: app.held_reply)."""
        return self.on_error.answer(HotRequest.whole(scope, b""), exc)

    def _hot_handler(self, scope: Scope, path: str, method: str) -> Handler | None:
        """The handler of a hot route, with the route's path parameters and template set in `scope`.

        Apart from the coroutine that serves the request, so the split path is not kept for as long
        as the request is (a held pull's wait)."""
        handler: Handler | None = None
        if path.startswith("/v1/topics/"):
            if path.endswith("/messages"):
                parts = path.split("/")  # "", "v1", "topics", topic, ("queues", id,) "messages"
                if len(parts) == 5 and parts[3] and method == "POST":
                    handler = self.produce
                    scope["path_params"] = {"topic": parts[3]}
                    scope[ROUTE_KEY] = PRODUCE_ROUTE
                elif len(parts) == 7 and parts[4] == "queues" and parts[3] and parts[5] and method == "GET":
                    handler = self.pull
                    scope["path_params"] = {"topic": parts[3], "queue_id": parts[5]}
                    scope[ROUTE_KEY] = PULL_ROUTE
            elif path.endswith("/messages/batch"):
                parts = path.split("/")  # "", "v1", "topics", topic, ("queues", id,) "messages", "batch"
                if len(parts) == 6 and parts[3] and method == "POST":
                    handler = self.produce_batch
                    scope["path_params"] = {"topic": parts[3]}
                    scope[ROUTE_KEY] = PRODUCE_BATCH_ROUTE
                elif len(parts) == 8 and parts[4] == "queues" and parts[3] and parts[5] and method == "GET":
                    handler = self.pull_batch
                    scope["path_params"] = {"topic": parts[3], "queue_id": parts[5]}
                    scope[ROUTE_KEY] = PULL_BATCH_ROUTE
        elif path.startswith("/v1/groups/") and method == "POST":
            parts = path.split("/")  # "", "v1", "groups", group, "topics", topic, action
            if len(parts) == 7 and parts[4] == "topics" and parts[3] and parts[5]:
                handler = self.group_actions.get(parts[6])
                if handler is not None:
                    scope["path_params"] = {"group": parts[3], "topic": parts[5]}
                    scope[ROUTE_KEY] = GROUP_ROUTES[parts[6]]
        return handler

    async def _serve(self, handler: Handler, scope: Scope, receive: Receive, send: Send, reply: list[int] | None) -> None:
        """The gates, the handler, the reply: what the FastAPI app's middleware and route do, in one frame."""
        if self.broker.loading and scope["path"] not in SERVED_WHILE_STARTING:
            await self._send_problem("STARTING", STARTING_DETAIL, scope, receive, send, reply)
            return
        limit = body_limit(scope, self.max_bytes, self.max_json_bytes)
        if limit.refusal is not None:
            await self._send_problem(limit.refusal[0], limit.refusal[1], scope, receive, send, reply)
            return
        request = HotRequest(scope, receive, limit.limit, limit.setting)
        try:
            response = await handler(request)
        except Exception as exc:  # mapped like the app's own exception handlers
            response = await self.on_error(request, exc)
        await self._send(response, scope, receive, send, reply)

    async def _send_problem(
        self, code: str, detail: str, scope: Scope, receive: Receive, send: Send, reply: list[int] | None = None
    ) -> None:
        await self._send(self.problem(code, detail, scope["path"][:200], None), scope, receive, send, reply)

    @staticmethod
    async def _send(response: Response, scope: Scope, receive: Receive, send: Send, reply: list[int] | None) -> None:
        """Write `response`: a plain one as its two messages, anything else (a stream) by calling it."""
        if not is_plain(response):
            await response(scope, receive, send if reply is None else _Observed(send, reply))
            return
        body = response.body
        if reply is not None:
            reply[0] = response.status_code
        await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": body})
        if reply is not None:
            reply[1] = len(body)


async def _no_more_messages() -> Message:
    """The receive of a request whose body was read whole before its handler ran."""
    return {"type": "http.disconnect"}


async def _send_health(send: Send, with_body: bool) -> None:
    await send(HEALTH_START)
    await send(HEALTH_BODY if with_body else HEAD_BODY)


class _Observed:
    """A send that notes the reply's status and body bytes in `reply` (requests not written by HotRoutes itself)."""

    __slots__ = ("send", "reply")

    def __init__(self, send: Send, reply: list[int]) -> None:
        self.send = send
        self.reply = reply

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.body":
            self.reply[1] += len(message.get("body", b""))
        elif kind == "http.response.start":
            self.reply[0] = message["status"]
        await self.send(message)
