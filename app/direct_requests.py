"""DirectRequests: a hot request served by the connection's protocol itself, without an ASGI cycle.

uvicorn gives every request a RequestResponseCycle, an `asyncio.Event`, a task that runs the
ASGI app on a later turn, a growing bytearray for the body (copied again when it is received)
and two `send` calls that rebuild the reply's head checking each header with a regular
expression; and it arms a keep-alive timer after every reply. For a produce, whose whole body
comes with its headers and whose reply is a few hundred bytes, that machinery cost about as
much as the plain-ASGI no-op it is compared with. So the server's protocol
(app.connections.BoundedHttpProtocol) hands a hot request (produce, pull, receive, ack: the
routes HotRoutes serves itself) here when it can:

- at its headers: `begin` asks HotRoutes for the handler (`direct_handler`: no guard but the ACL
  gate, which `answer` consults, hot routes on, the store loaded, a hot route, a body with a Content-Length within its limit or, for a GET,
  none) and, when there
  is one, the protocol keeps a `DirectExchange` as the connection's cycle instead of uvicorn's;
- its body's pieces are kept as they arrive and joined once (no copy when it came in one);
- at its end: `serve` runs HotRoutes' `answer` (the query, the ACL gate's verdict, the handler, its
  errors mapped: the same answers as the ASGI way) by stepping its coroutine; it usually ends without waiting and the
  reply is written at once (ReplyTransport joins it with the turn's other writes, after the
  turn's dispatch pass); a durable produce's reply is held until its durability wait ends
  (app.held_reply: `release` writes it); one that waits (a held pull or receive) is resumed
  when the future it waits on completes (`_Resumed`: no Task; its reply is written at once, not at the
  turn's end: its connection has nothing else to join it with) or, past a wait on anything else, continued
  by a task; either is in the server's task set, which graceful shutdown waits for and, at its deadline,
  cancels;
- the reply's head is the status line, uvicorn's default headers (the date) and the response's
  own; the request is counted and logged as HotRoutes counts it, and uvicorn's
  `on_response_complete` runs (the keep-alive timer, a pipelined request's start).

Invariants: a request is served here only when no earlier request of its connection is still
unanswered, so replies keep their requests' order (a request that arrives meanwhile waits in
uvicorn's pipeline until `on_response_complete`); nothing here raises into the parser: an
unexpected error closes the connection and is logged; a request whose connection closes before
its body is complete is not answered, counted or served.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any

import httptools
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from app.access_gate import audit_answer
from app.held_reply import HELD_REPLY_KEY, HOLDS_REPLY_KEY, HeldReply
from app.reply_transport import EARLY_REPLY_KEY
from app.responses import is_plain

if TYPE_CHECKING:
    from app.connections import BoundedHttpProtocol
    from app.hot_routes import Handler, HotRoutes
    from app.produce_lane import ProduceLane

log = logging.getLogger("tidemq.app")
# Where every hot route's request target starts (app.hot_routes); anything else is not looked at further.
HOT_URL_PREFIXES = (b"/v1/topics/", b"/v1/groups/")


class _NoReader:
    """A DirectExchange's `message_event`: uvicorn's `connection_lost` sets a cycle's event to wake the task reading
    its body, and nothing reads a direct exchange's body but the protocol itself."""

    __slots__ = ()

    def set(self) -> None:
        """Nothing to wake."""


_NO_READER = _NoReader()


class DirectExchange:
    """One request served by the protocol: the fields uvicorn's protocol reads of its cycle
    (`response_complete`, `disconnected`, `keep_alive`, `more_body`, `message_event.set()`),
    the handler, and the body's pieces read so far.

    It refers to nothing that refers back to it (its event is the shared `_NO_READER`), so it and its scope are
    freed when the request ends, not left to the cyclic collector: a reference cycle per request made a collection
    every few dozen requests, and their pauses were a held pull's slowest deliveries."""

    __slots__ = ("scope", "handler", "keep_alive", "start_ns", "chunks", "more_body", "response_complete", "disconnected", "message_event")

    def __init__(self, scope: Any, handler: Handler, keep_alive: bool) -> None:
        self.scope = scope
        self.handler = handler
        self.keep_alive = keep_alive  # False: the connection closes after the reply (HTTP/1.0, `Connection: close`, shutdown)
        self.start_ns = time.perf_counter_ns()
        self.chunks: list[bytes] = []
        self.more_body = True  # until the parser reports the message complete
        self.response_complete = False
        self.disconnected = False  # set by uvicorn's connection_lost
        self.message_event = _NO_READER  # uvicorn's connection_lost wakes a cycle's reader

    def body(self) -> bytes:
        chunks = self.chunks
        self.chunks = []
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class DirectRequests:
    """The server's: which requests its connections serve themselves, and serving them."""

    def __init__(self, hot: HotRoutes) -> None:
        self.hot = hot
        self.served = 0  # requests served here (tests and benchmarks)
        self.continued = 0  # of them, those whose handler waited and that were continued
        self.resumed = 0  # of those, the ones continued without a task (_Resumed) from their first wait
        self.read_whole = 0  # of the requests served here, those read by app._http in one call (`begin_whole`)
        self.held_released = 0  # replies held for a durability wait (app.held_reply) and written
        self._defaults: list[tuple[bytes, bytes]] | None = None  # uvicorn's default headers last joined
        # A produce's reply yields to the replies of the held requests its dispatch woke (app.reply_transport).
        self._yielding_handlers = (hot.produce, hot.produce_batch)
        self._defaults_head = b""  # they as head lines
        self.lane: ProduceLane | None = None  # raw produces served from the connection's read (app.produce_lane)

    def begin(self, protocol: BoundedHttpProtocol) -> DirectExchange | None:
        """At a request's complete headers (httptools' callbacks): its exchange when it is served here (its scope
        completed as uvicorn completes it: a POST or GET only), else None and uvicorn serves it."""
        if not protocol.url.startswith(HOT_URL_PREFIXES):  # health, admin, console: uvicorn's, without a second parse here
            return None
        parser = protocol.parser
        method = parser.get_method()
        if (method != b"POST" and method != b"GET") or parser.should_upgrade() or protocol.expect_100_continue:
            return None
        scope: Any = protocol.scope  # uvicorn's HTTPScope, completed here as uvicorn completes it
        http_version = parser.get_http_version()
        if http_version != "1.1":
            scope["http_version"] = http_version
        url = httptools.parse_url(protocol.url)
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        return self._exchange(scope, method == b"POST", url.path, url.query or b"", keep_alive, protocol.root_path)

    def begin_whole(self, scope: Any, is_post: bool, target: bytes, keep_alive: bool, root_path: str) -> DirectExchange | None:
        """A request read whole by app._http (`whole_request`: an origin-form target without a fragment, its
        scope made by the protocol as uvicorn makes it): its exchange when it is served here, else None."""
        raw_path, _, query = target.partition(b"?")
        exchange = self._exchange(scope, is_post, raw_path, query, keep_alive, root_path)
        if exchange is not None:
            self.read_whole += 1
        return exchange

    def _exchange(
        self, scope: Any, is_post: bool, raw_path: bytes, query: bytes, keep_alive: bool, root_path: str
    ) -> DirectExchange | None:
        """The scope completed with the method, path and query (as uvicorn's `on_headers_complete` completes it) and
        the exchange of a hot route's handler; None when HotRoutes has none for it."""
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope["method"] = "POST" if is_post else "GET"
        scope["path"] = root_path + path
        scope["raw_path"] = root_path.encode("ascii") + raw_path
        scope["query_string"] = query
        handler = self.hot.direct_handler(scope)
        if handler is None:
            return None
        scope[HOLDS_REPLY_KEY] = True  # a durable produce holds its reply here (`reply`) instead of waiting
        return DirectExchange(scope, handler, keep_alive)

    def serve(self, protocol: BoundedHttpProtocol, exchange: DirectExchange) -> None:
        """At the request's end: answer it now, or continue it in a task when its handler waits."""
        self.served += 1
        self.hot.stats.in_flight += 1
        answer = self.hot.answer(exchange.handler, exchange.scope, exchange.body())
        try:
            waited = answer.send(None)
        except StopIteration as done:
            self.reply(protocol, exchange, done.value)
            return
        except Exception:
            self.failed(protocol, exchange)
            return
        self.continued += 1
        if _awaitable_here(waited, protocol.loop):
            self.resumed += 1
            _Resumed(self, protocol, exchange, answer).wait_on(waited)
        else:
            self.continue_in_task(protocol, exchange, answer, waited)

    def continue_in_task(
        self, protocol: BoundedHttpProtocol, exchange: DirectExchange, answer: Coroutine[Any, Any, Response], waited: Any
    ) -> None:
        """Continue `answer`, stepped by hand until it yielded `waited`, in a task of the server's task set."""
        task = protocol.loop.create_task(self._continue(protocol, exchange, answer, waited))
        tasks = protocol.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _continue(
        self, protocol: BoundedHttpProtocol, exchange: DirectExchange, answer: Coroutine[Any, Any, Response], waited: Any
    ) -> None:
        try:
            response = await _Continued(answer, waited)
        except asyncio.CancelledError:  # graceful shutdown's deadline passed: no reply, the connection closed
            self.failed(protocol, exchange, cancelled=True)
            raise
        except BaseException:  # a defect (HotRoutes maps the handler's errors): no reply, the connection closed
            self.failed(protocol, exchange)
            raise
        self.reply(protocol, exchange, response)

    def reply(self, protocol: BoundedHttpProtocol, exchange: DirectExchange, response: Response, now: bool = False) -> None:
        """Write `response` (a whole body; `now`: at once, else joined with the turn's writes), count the request, and
        let uvicorn start what follows; a reply its produce held (app.held_reply) is written when the durability wait
        it owes ends (`release`)."""
        held: HeldReply | None = exchange.scope.pop(HELD_REPLY_KEY, None)
        if held is not None:
            held.hold(self, protocol, exchange, response)
            return
        self._write_reply(protocol, exchange, response, now)

    def release(
        self,
        protocol: BoundedHttpProtocol,
        exchange: DirectExchange,
        response: Response,
        problem: BaseException | None,
        audited: str | None,
    ) -> None:
        """Write a held reply (app.held_reply) once its durability wait ended: `response`, or the reply `problem` maps to."""
        self.held_released += 1
        if problem is not None:
            response = self.hot.error_reply(exchange.scope, problem)
        if audited is not None:
            audit_answer(exchange.scope, audited, response.status_code)
        self._write_reply(protocol, exchange, response, True)

    def _write_reply(self, protocol: BoundedHttpProtocol, exchange: DirectExchange, response: Response, now: bool = False) -> None:
        """Write the reply (`now`: at once, a produce's too; else joined with the turn's writes) and end the request."""
        assert is_plain(response), "the hot routes and their problems answer with a whole body"
        hot = self.hot
        hot.stats.in_flight -= 1
        exchange.response_complete = True
        status = response.status_code
        body = response.body
        if not exchange.disconnected:
            keep_alive = exchange.keep_alive
            head: list[bytes | memoryview] = [STATUS_LINE[status], self.default_head(protocol.server_state.default_headers)]
            for name, value in response.raw_headers:
                if name == b"connection" and b"close" in value.lower():
                    keep_alive = False
                head += (name, b": ", value, b"\r\n")
            if not keep_alive:
                head.append(b"connection: close\r\n")
            head += (b"\r\n", body)
            if now:
                protocol.replies.write_now(b"".join(head), EARLY_REPLY_KEY in exchange.scope)
            elif exchange.handler in self._yielding_handlers:  # identity first: no __eq__ call
                protocol.replies.write_yielding(b"".join(head))
            else:
                protocol.replies.write(b"".join(head))
            if not keep_alive:
                protocol.transport.close()
        hot.count(exchange.scope, status, exchange.start_ns, len(body))
        protocol.on_response_complete()

    def default_head(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        """uvicorn's default headers as head lines, joined once per list: uvicorn's server replaces the list when the
        date it carries changes (once a second)."""
        if headers is not self._defaults:
            self._defaults = headers
            self._defaults_head = b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers)
        return self._defaults_head

    def failed(self, protocol: BoundedHttpProtocol, exchange: DirectExchange, cancelled: bool = False) -> None:
        """An answer that raised (HotRoutes maps the handler's errors: this is a defect) or was cancelled."""
        self.hot.stats.in_flight -= 1
        exchange.response_complete = True
        what, path = exchange.scope["method"], exchange.scope["path"][:200]
        if cancelled:
            log.info("%s %s was cut by the server's stop; closing its connection", what, path)
        else:
            log.exception("serving %s %s failed; closing the connection", what, path)
        self.hot.count(exchange.scope, 500, exchange.start_ns, 0)
        protocol.transport.close()


def _awaitable_here(waited: Any, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether `waited`, what a coroutine stepped by hand yielded, is what a Task would wait on: a future of `loop`
    awaited (its `_asyncio_future_blocking` set by its `__await__`)."""
    return getattr(waited, "_asyncio_future_blocking", False) is True and asyncio.isfuture(waited) and waited.get_loop() is loop


class _Resumed:
    """A hot request whose answer waits for a future (a produce's durability wait, a held pull's arrival), resumed by
    that future's completion, without a Task: a task is a coroutine object, a Task, its entry in asyncio's set of
    all tasks (a WeakSet, in Python), a loop turn to start it and one to run its done callbacks; a produce under
    SYNC_FLUSH waits once and is then answered. What a Task would do for it is done here: the future yielded is
    waited on (`wait_on`) and the coroutine sent None when it completes; a yield that is not such a future (a bare
    yield, a future of another loop) passes the coroutine to a Task from there on (`continue_in_task`). It is in the
    server's task set until answered, so graceful shutdown waits for it, and its `cancel` (at the shutdown's
    deadline) cancels the future it waits on: the coroutine's await raises CancelledError when resumed, as under a
    Task, and the connection is closed without a reply."""

    __slots__ = ("requests", "protocol", "exchange", "answer", "waiting")

    def __init__(
        self, requests: DirectRequests, protocol: BoundedHttpProtocol, exchange: DirectExchange, answer: Coroutine[Any, Any, Response]
    ) -> None:
        self.requests = requests
        self.protocol = protocol
        self.exchange = exchange
        self.answer = answer
        self.waiting: asyncio.Future[Any] | None = None  # the future the answer waits on
        protocol.tasks.add(self)  # type: ignore[arg-type]  # uvicorn's task set: it waits for and cancels its members

    def wait_on(self, waited: asyncio.Future[Any]) -> None:
        waited._asyncio_future_blocking = False  # taken, as a Task takes it
        self.waiting = waited
        waited.add_done_callback(self._resume)

    def _resume(self, _done: asyncio.Future[Any]) -> None:
        self.waiting = None
        requests, protocol, exchange = self.requests, self.protocol, self.exchange
        try:
            waited = self.answer.send(None)
        except StopIteration as done:
            protocol.tasks.discard(self)
            # Waited (a held pull's or receive's arrival): nothing of its connection to join it with in this turn.
            requests.reply(protocol, exchange, done.value, exchange.handler not in requests._yielding_handlers)
            return
        except asyncio.CancelledError:  # graceful shutdown's deadline passed: no reply, the connection closed
            protocol.tasks.discard(self)
            requests.failed(protocol, exchange, cancelled=True)
            return
        except Exception:  # a defect (HotRoutes maps the handler's errors): no reply, the connection closed
            protocol.tasks.discard(self)
            requests.failed(protocol, exchange)
            return
        if _awaitable_here(waited, protocol.loop):
            self.wait_on(waited)
            return
        protocol.tasks.discard(self)
        requests.continue_in_task(protocol, exchange, self.answer, waited)

    def cancel(self, msg: Any = None) -> bool:
        """Cancel the future waited on (Task.cancel's effect on a task that waits): False when there is none."""
        waiting = self.waiting
        return waiting.cancel(msg) if waiting is not None else False


class _Continued:
    """Awaits a coroutine already stepped once by hand (`waited`: what that step yielded) to its end:
    the task that awaits this resumes the coroutine as the task would have from its start."""

    __slots__ = ("coro", "waited")

    def __init__(self, coro: Coroutine[Any, Any, Response], waited: Any) -> None:
        self.coro = coro
        self.waited = waited

    def __await__(self) -> Generator[Any, None, Response]:
        coro = self.coro
        waited = self.waited
        while True:
            try:
                yield waited
            except BaseException as exc:  # thrown into the task (its cancellation): into the coroutine
                try:
                    waited = coro.throw(exc)
                except StopIteration as done:
                    response: Response = done.value
                    return response
                continue
            try:
                waited = coro.send(None)
            except StopIteration as done:
                response = done.value
                return response
