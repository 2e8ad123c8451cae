"""Connection limits: header and body read deadlines, the bound on open connections, the descriptor budget.

uvicorn has a keep-alive timeout but no deadline for a request's headers (a client that sends
one byte every few seconds holds its connection forever), and its `limit_concurrency` answers
a plain-text 503. `bounded_protocol` subclasses uvicorn's httptools protocol to add:

- A new connection's first request, and any request whose first bytes arrived without all its
  headers, must have its headers complete within `header_read_timeout_ms` (of the connection
  opening, or of that first read); otherwise the connection is closed, after a 408
  REQUEST_TIMEOUT problem when part of a request had arrived. An idle keep-alive connection is
  closed `timeout_keep_alive` after its last reply, by one timer per connection re-armed only when it
  fires (not one made per reply and cancelled per read, as uvicorn does). A request that arrives whole in one read costs no
  timer; one whose headers are complete (a held pull, a body being read) is not timed by this
  deadline: the body has its own, a held pull its wait.
- A request's body must arrive whole within `body_read_timeout_ms` of its headers: the timer is
  armed only when a read leaves the body incomplete, and on expiry it marks the request for
  app.body_limit, whose receive() then raises the 408 REQUEST_TIMEOUT problem.
- A request's line and headers hold at most `max_header_bytes` (431 HEADERS_TOO_LARGE and the
  connection closed past it), and the incomplete headers of all connections at most
  `max_header_bytes_total` (a read that would pass it is answered 503 HEADERS_BUSY and its
  connection closed): the bytes are counted before the parser keeps them, so connections that
  send endless headers cost at most the total. Bytes of a body are not counted.
- A connection opened while `max_connections` are open is answered, request by request, with
  503 TOO_MANY_CONNECTIONS and closed; /healthz and /readyz are still served on it, so
  monitoring sees a busy broker as alive.
- A request's reply is written through a ReplyTransport that runs the server's dispatch barrier
  first, and its scope carries the barrier (`BARRIER_KEY`), so a produce may defer its dispatch
  to the turn's one pass (app.dispatch_barrier).
- A produce the server can serve without an ASGI cycle (app.direct_requests) is served by the
  protocol itself: its exchange takes the cycle's place from its headers to its reply. One that
  arrives whole in one read while the connection is between requests, in the plain forms, is read
  by one C call (app._http: docs/native.md) and httptools never sees it; its head is held to the
  same two header bounds, and anything that call does not take goes to httptools as it came.
- A request's scope offers (`LOST_KEY`, app.long_poll) a future completed when its connection is
  lost, which held requests wait on instead of reading the request's messages until a disconnect.
- A reply whose client takes nothing for `send_stall_timeout_ms` while the connection's buffers
  are full (the transport paused writing: the kernel's buffers and the transport's high-water
  mark are full) is cut: the connection is aborted, which the app sees as a disconnect. So an
  event stream to a client that stopped reading (a stopped process keeps its connection open)
  ends, and its messages come back to the group after their invisible time.

`app.open_files.fit_descriptors` makes those bounds the ones that answer (descriptors).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app._http import whole_request
from app.body_limit import BODY_TIMED_OUT
from app.born_host import born_host_of_client
from app.direct_requests import DirectExchange, DirectRequests
from app.dispatch_barrier import BARRIER_KEY, DispatchBarrier
from app.long_poll import LOST_KEY
from app.problems import ProblemReply
from app.reply_transport import ReplyTransport
from app.settings import BrokerSettings
from store import DEFAULT_BORN_HOST

log = logging.getLogger("tidemq.app")
# A connection's `idle_since` while a request is under way (no keep-alive deadline runs).
BUSY = -1.0
# How a request app._http may read whole starts: a hot route's method and path prefix (app.hot_routes).
WHOLE_REQUEST_STARTS = (b"POST /v1/topics/", b"GET /v1/topics/", b"POST /v1/groups/")
# How a request the produce lane may serve starts (app.produce_lane), and what it holds: one of its media types as
# clients write them (a request of another type is not read twice; one that spells the type in capitals goes the
# direct way).
LANE_START = b"POST /v1/topics/"
LANE_RAW = b"application/octet-stream"
LANE_JSON = b"application/json"
# Paths still served on a connection past the bound (cheap, no store access).
ALWAYS_SERVED = frozenset({"/healthz", "/readyz"})


def refusing_app(app: ASGIApp, max_connections: int, problem: ProblemReply) -> ASGIApp:
    """The app of a connection opened past the bound: 503 TOO_MANY_CONNECTIONS (and close), but health."""

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in ALWAYS_SERVED:

            async def send_and_close(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
                await send(message)

            await app(scope, receive, send_and_close)
            return
        detail = f"{max_connections} connections are open already; retry shortly"
        response = problem("TOO_MANY_CONNECTIONS", detail, scope.get("path"), {"Connection": "close"})
        await response(scope, receive, send)

    return refuse


class HeaderBytes:
    """The bytes of incomplete request headers held over all of a server's connections (event loop only)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.refusals = 0


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body read deadlines and a bound on open connections."""

    # Slots: these attributes kept in the instance's __dict__ made it grow to a larger table (about
    # 1.5 KiB more per connection, a held pull's connection included).
    __slots__ = (
        "header_timer",
        "body_timer",
        "stall_timer",
        "reading_headers",
        "header_bytes",
        "header_tail",
        "in_body",
        "lost",
        "gone",
        "direct",
        "idle_since",
        "born_host",
    )

    header_read_timeout_s = 10.0
    body_read_timeout_s = 30.0
    send_stall_timeout_s = 30.0
    max_connections = 1
    max_header_bytes = 65_536
    header_bytes_total: HeaderBytes  # set by bounded_protocol: shared by the server's connections
    problem: ProblemReply  # set by bounded_protocol: the app's counted problem replies
    on_send_stall: Callable[[], None]  # set by bounded_protocol: counts a connection cut for not reading
    dispatch_barrier: DispatchBarrier | None = None  # set by bounded_protocol: the server's (app.dispatch_barrier)
    direct_requests: DirectRequests | None = None  # set by bounded_protocol: the produces served without a cycle

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timer: asyncio.TimerHandle | None = None
        self.body_timer: asyncio.TimerHandle | None = None
        self.stall_timer: asyncio.TimerHandle | None = None
        # True between the first byte of a request and its complete headers.
        self.reading_headers = False
        self.header_bytes = 0  # bytes received towards the current request's line and headers
        self.header_tail = b""  # the last 3 header bytes received, to find a blank line split over two reads
        self.in_body = False  # between a request's complete headers and its complete message
        self.lost: asyncio.Future[None] | None = None  # completed when the connection closes (made when a request asks)
        self.gone = False  # the connection was lost
        # Serves this connection's produces without a cycle (None: every request goes to the app).
        self.direct: DirectRequests | None = self.direct_requests
        self.idle_since = BUSY  # the loop's time its last reply completed with nothing after it (BUSY: a request is under way)
        self.born_host = DEFAULT_BORN_HOST  # the client's BORNHOST (app.born_host), worked out once the connection is made

    def data_received(self, data: bytes) -> None:
        direct = self.direct
        if direct is not None and data.startswith(WHOLE_REQUEST_STARTS) and self._at_request_start():
            lane = direct.lane
            if lane is not None and data.startswith(LANE_START) and (LANE_RAW in data or LANE_JSON in data):
                # The produce lane (app.produce_lane) when it takes the read whole, its head within both header bounds.
                total = self.header_bytes_total
                self.idle_since = BUSY
                if lane.serve(self, data, min(self.max_header_bytes, total.limit - total.held)):
                    if self.header_timer is not None:
                        self._disarm_header_timer()
                    return
            if self._serve_whole(data):
                return
        if not self._count_header_bytes(data):
            return
        super().data_received(data)
        if self.reading_headers and self.header_timer is None:
            self._arm_header_timer()  # headers begun but not complete: they have a deadline from now
        cycle = self.cycle
        # Only a body still incomplete after this read is timed: one that came with its headers costs no timer.
        if self.body_timer is None and cycle is not None and cycle.more_body and not cycle.response_complete:
            self.body_timer = self.loop.call_later(self.body_read_timeout_s, self._body_too_slow, cycle)

    def _at_request_start(self) -> bool:
        """No request of this connection is being read or is unanswered, and the parser holds nothing."""
        cycle = self.cycle
        return (
            not self.reading_headers and not self.in_body and not self.header_bytes and not self.pipeline
            and (cycle is None or cycle.response_complete)
        )  # fmt: skip

    def _serve_whole(self, data: bytes) -> bool:
        """Serve `data` when it is exactly one plain request to a hot route, read by app._http in one call instead of
        through httptools' callbacks (its scope as uvicorn's callbacks make it); False when it is not (the parser
        has not seen it: it reads it as usual). Its head is within both header bounds, or it is not taken here."""
        total = self.header_bytes_total
        whole = whole_request(data, min(self.max_header_bytes, total.limit - total.held))
        if whole is None:
            return False
        is_post, target, headers, body, keep_alive, http_10 = whole
        scope: Any = {
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.0" if http_10 else "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "root_path": self.root_path,
            "headers": headers,
            "state": self.app_state.copy(),
            LOST_KEY: self.lost_future,
        }
        if self.dispatch_barrier is not None:
            scope[BARRIER_KEY] = self.dispatch_barrier
        direct = self.direct
        assert direct is not None, "checked by data_received"
        exchange = direct.begin_whole(scope, is_post, target, keep_alive, self.root_path)
        if exchange is None:
            return False
        self.idle_since = BUSY
        if self.header_timer is not None:
            self._disarm_header_timer()
        self.scope, self.headers, self.url = scope, headers, target  # what uvicorn's callbacks leave for its request
        if body:
            exchange.chunks.append(body)
        exchange.more_body = False
        self.cycle = exchange  # type: ignore[assignment]  # read by uvicorn's protocol as a cycle
        direct.serve(self, exchange)
        return True

    def _count_header_bytes(self, data: bytes) -> bool:
        """Count a read's bytes up to the blank line ending the headers (all of them when it has none)
        unless a body is being read; False (and the connection answered and closed) when they pass the
        per-request or the total bound."""
        if self.in_body:
            return True  # the parser is in a request's body (also after an early answer, e.g. 413)
        n = _header_part(self.header_tail, data)  # what follows the blank line is a body
        self.header_tail = (self.header_tail + data[-3:])[-3:] if n == len(data) else b""
        total = self.header_bytes_total
        if self.header_bytes + n > self.max_header_bytes:
            self._release_header_bytes()
            self._write_problem_and_close("HEADERS_TOO_LARGE", f"the request's line and headers pass {self.max_header_bytes} bytes")
            return False
        if total.held + n > total.limit:
            total.refusals += 1
            self._release_header_bytes()
            detail = f"{total.held} bytes of request headers are being received on other connections"
            self._write_problem_and_close("HEADERS_BUSY", detail)
            return False
        self.header_bytes += n
        total.held += n
        return True

    def _release_header_bytes(self) -> None:
        self.header_bytes_total.held -= self.header_bytes
        self.header_bytes = 0
        self.header_tail = b""

    def on_body(self, body: bytes) -> None:
        cycle: Any = self.cycle  # uvicorn's cycle, or this protocol's DirectExchange
        if type(cycle) is DirectExchange:
            if not cycle.response_complete:
                cycle.chunks.append(body)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        self.in_body = False
        cycle: Any = self.cycle  # uvicorn's cycle, or this protocol's DirectExchange
        if type(cycle) is DirectExchange:
            if self.body_timer is not None:
                self._disarm_body_timer()
            if not cycle.response_complete:
                cycle.more_body = False
                assert self.direct is not None, "an exchange is made by the connection's DirectRequests"
                self.direct.serve(self, cycle)
            return
        super().on_message_complete()
        self._disarm_body_timer()

    def _disarm_body_timer(self) -> None:
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def _body_too_slow(self, cycle: Any) -> None:
        self.body_timer = None
        if type(cycle) is DirectExchange:
            if cycle.more_body and not cycle.response_complete and not cycle.disconnected:
                cycle.response_complete = True
                self._write_problem_and_close("REQUEST_TIMEOUT", f"the request's body did not arrive within {self.body_read_timeout_s:g} s")
            return
        if cycle.more_body and not cycle.response_complete and not cycle.disconnected:
            # app.body_limit's receive raises BodyTimeout on this mark: a 408 through the error table.
            cycle.scope[BODY_TIMED_OUT] = self.body_read_timeout_s
            cycle.message_event.set()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn declares BaseTransport
        self.replies = ReplyTransport(transport, self.loop, self.dispatch_barrier)  # what `transport` is from here on
        super().connection_made(self.replies)  # type: ignore[arg-type]  # a wrapper with Transport's methods, not a subclass
        self.born_host = born_host_of_client(self.client)  # the peer is the connection's: once, not per produce
        if len(self.connections) > self.max_connections:
            self.app = refusing_app(self.app, self.max_connections, self.problem)
            self.direct = None  # every request of this connection is refused by the app above
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(None)
        self._release_header_bytes()
        self._disarm_header_timer()
        self._disarm_body_timer()
        self._disarm_stall_timer()
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.stall_timer is None:
            self.stall_timer = self.loop.call_later(self.send_stall_timeout_s, self._send_stalled)

    def resume_writing(self) -> None:
        self._disarm_stall_timer()
        super().resume_writing()

    def _disarm_stall_timer(self) -> None:
        if self.stall_timer is not None:
            self.stall_timer.cancel()
            self.stall_timer = None

    def _send_stalled(self) -> None:
        self.stall_timer = None
        if self.transport.is_closing():
            return
        log.info("closing a connection from %s: its client took nothing for %g s", self.client, self.send_stall_timeout_s)
        self.on_send_stall()
        self.transport.abort()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.reading_headers = True
        self.scope[LOST_KEY] = self.lost_future  # type: ignore[literal-required]  # tidemq's own scope key
        if self.dispatch_barrier is not None:  # the reply goes through the ReplyTransport: a produce may defer its dispatch
            self.scope[BARRIER_KEY] = self.dispatch_barrier  # type: ignore[literal-required]  # tidemq's own scope key

    def lost_future(self) -> asyncio.Future[None]:
        """A future completed when this connection is lost (at once when it is already): a held request's
        way to learn that its client went away without reading the request's messages."""
        if self.lost is None:
            self.lost = self.loop.create_future()
            if self.gone:
                self.lost.set_result(None)
        return self.lost

    def on_headers_complete(self) -> None:
        self.reading_headers = False
        self.in_body = True
        self._release_header_bytes()  # the rest of this read, and what follows, is the body
        if self.header_timer is not None:  # the common request came whole: no timer, no call
            self._disarm_header_timer()
        direct = self.direct
        if direct is not None and (self.cycle is None or self.cycle.response_complete):
            exchange = direct.begin(self)
            if exchange is not None:
                self.cycle = exchange  # type: ignore[assignment]  # read by uvicorn's protocol as a cycle
                return
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        """uvicorn's end of a reply (the next pipelined request started, reads resumed), with the keep-alive
        deadline kept by one timer that is re-armed only when it fires (`_keep_alive_due`) instead of a timer
        made by every reply and cancelled by the next read."""
        if self.body_timer is not None:  # answered (e.g. 413 before the body): the rest of the body is not waited for
            self._disarm_body_timer()
        self.server_state.total_requests += 1
        if self.replies.is_closing():
            return
        flow = self.flow
        if flow.read_paused:  # resume_reading's own test, without its call (every reply)
            flow.resume_reading()
        if self.pipeline:
            self.idle_since = BUSY
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self.idle_since = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._keep_alive_due)

    def _unset_keepalive_if_required(self) -> None:
        """uvicorn's at every read (and at a reply's end): the connection is busy; its keep-alive timer, when armed,
        finds that when it fires."""
        self.idle_since = BUSY

    def _keep_alive_due(self) -> None:
        """The keep-alive timer: a connection idle for `timeout_keep_alive` since its last reply is closed (uvicorn's
        handler); one idle for less is checked again when that time is up; a busy one is not timed (its next reply
        arms the timer again)."""
        self.timeout_keep_alive_task = None
        since = self.idle_since
        if since == BUSY or self.transport.is_closing():
            return
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_due)
            return
        self.timeout_keep_alive_handler()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self.header_timer = self.loop.call_later(self.header_read_timeout_s, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _headers_too_slow(self) -> None:
        self.header_timer = None
        if self.transport.is_closing():
            return
        if self.reading_headers:
            detail = f"the request's headers did not arrive within {self.header_read_timeout_s:g} s"
            self._write_problem_and_close("REQUEST_TIMEOUT", detail)
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser refuses (a malformed request line, header or
        Content-Length), as a counted problem reply rather than uvicorn's plain text."""
        self._write_problem_and_close("REQUEST_INVALID", f"the request is not valid HTTP/1.1 ({msg.rstrip('.')})")

    def _write_problem_and_close(self, code: str, detail: str) -> None:
        """A problem reply written straight to the connection (no request is under way to answer it), then closed."""
        response = self.problem(code, detail, None, None)
        reason = HTTPStatus(response.status_code).phrase.encode()
        head = [b"HTTP/1.1 %d %s\r\n" % (response.status_code, reason)]
        head += [name + b": " + value + b"\r\n" for name, value in response.raw_headers if name != b"connection"]
        self.transport.write(b"".join([*head, b"connection: close\r\n\r\n", response.body]))
        self.transport.close()


def _header_part(tail: bytes, data: bytes) -> int:
    """Bytes of `data` up to and with the blank line ending a request's headers (all of `data` when
    it has none); `tail`: the last bytes of the headers before it (a blank line split over two reads)."""
    if tail:
        split = (tail + data[:3]).find(b"\r\n\r\n")
        if split >= 0:
            return split + 4 - len(tail)
    end = data.find(b"\r\n\r\n")
    return len(data) if end < 0 else end + 4


def bounded_protocol(
    settings: BrokerSettings,
    problem: ProblemReply,
    on_send_stall: Callable[[], None],
    dispatch_barrier: DispatchBarrier | None = None,
    direct_requests: DirectRequests | None = None,
) -> type[BoundedHttpProtocol]:
    """The protocol class uvicorn builds per connection, with this broker's limits, its counted problem replies,
    the count of connections cut for not reading, the dispatch barrier its replies wait for and the produces
    it serves itself."""
    return type(
        "TidemqHttpProtocol",
        (BoundedHttpProtocol,),
        {
            "header_read_timeout_s": settings.header_read_timeout_ms / 1000.0,
            "body_read_timeout_s": settings.body_read_timeout_ms / 1000.0,
            "send_stall_timeout_s": settings.send_stall_timeout_ms / 1000.0,
            "on_send_stall": staticmethod(on_send_stall),
            "max_connections": settings.max_connections,
            "max_header_bytes": settings.max_header_bytes,
            "header_bytes_total": HeaderBytes(settings.max_header_bytes_total),
            "problem": staticmethod(problem),
            "dispatch_barrier": dispatch_barrier,
            "direct_requests": direct_requests,
        },
    )
