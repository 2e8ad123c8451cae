"""The sync client: `Client("http://127.0.0.1:8080")`, safe to share between threads.

    with Client(url, token=None) as c:
        c.produce("orders", b"order 1", tags="created", keys=["order-1"])
        result = c.pull("orders", 0, offset=0, wait_ms=5000)

Every method is one HTTP request on a pooled keep-alive socket (`tidemq.sync_transport`) and
returns the reply's value; a problem reply raises a `tidemq.errors.ProblemError` subclass carrying
its `code`. The request-reply methods are `tidemq.client_base.ClientBase`'s, as on `AsyncClient`;
only `stream` is written here, as a generator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

from tidemq import calls
from tidemq.calls import Call, error_of, stream_end, stream_message
from tidemq.client_base import ClientBase
from tidemq.errors import TidemqClientError, TransportError
from tidemq.failover import Attempt
from tidemq.models import Message
from tidemq.options import DEFAULT_STREAM_IDLE_S
from tidemq.sse import EventParser
from tidemq.sync_transport import SyncPool

P = ParamSpec("P")
T = TypeVar("T")


class Client(ClientBase[SyncPool]):
    _pool_type = SyncPool

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()

    def _bind(self, build: Callable[P, Call[T]]) -> Callable[P, T]:
        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            call = build(*args, **kwargs)
            attempt = self._attempt(call)
            while True:
                try:
                    result = call.result(self._pool_for(attempt.target).request(call.request, self.timeout_s + call.wait_s))
                    attempt.succeeded()
                    return result
                except TidemqClientError as error:
                    pause = attempt.pause_before_retry(error)
                    if pause is None:
                        raise
                time.sleep(pause)
                self._read_route(attempt)

        return run

    def _read_route(self, attempt: Attempt) -> None:
        """Re-read the route of the call's topic (tidemq.failover) from the first broker that answers."""
        request = attempt.route_request()
        if request is None:
            return
        for url in attempt.route_sources():
            try:
                response = self._pool_for(url).request(request, self.timeout_s)
            except TransportError:
                continue
            attempt.learn(response)
            return

    def stream(
        self,
        group: str,
        topic: str,
        *,
        max_in_flight: int = 32,
        invisible_ms: int = 30_000,
        tag: str | None = None,
        idle_timeout_s: float = DEFAULT_STREAM_IDLE_S,
        sql: str | None = None,
    ) -> Iterator[Message]:
        """Received messages as the broker pushes them, at most `max_in_flight` unacked; ack each.
        The generator ends when the broker ends the stream: quietly when it stops, else by raising the
        error its last event names (TOPIC_NOT_FOUND for a deleted topic, Unauthenticated or Forbidden
        when an ACL reload revoked the access, ...). Closing it closes the connection."""
        request = calls.stream_request(group, topic, max_in_flight=max_in_flight, invisible_ms=invisible_ms, tag=tag, sql=sql)
        with self._pool.stream(request, idle_timeout_s) as (head, pieces):
            if head.status != 200:
                head.body = b"".join(pieces)
                raise error_of(head)
            parser = EventParser()
            for piece in pieces:
                for name, data in parser.feed(piece):
                    if name == "message":
                        yield stream_message(data)
                    elif name == "end":
                        error = stream_end(data)
                        if error is not None:
                            raise error
                        return
