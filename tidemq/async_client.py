"""The async client: `AsyncClient("http://127.0.0.1:8080")`, used from one event loop.

    async with AsyncClient(url, token=None) as c:
        await c.produce("orders", b"order 1", tags="created", keys=["order-1"])
        result = await c.pull("orders", 0, offset=0, wait_ms=5000)

Each method returns a coroutine of one HTTP request on a pooled keep-alive asyncio connection
(`tidemq.async_transport`). Methods, arguments and problem exceptions are `Client`'s (both take
them from `tidemq.client_base.ClientBase`); `stream` is an async generator.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from tidemq import calls
from tidemq.async_transport import AsyncPool
from tidemq.calls import Call, error_of, stream_end, stream_message
from tidemq.client_base import ClientBase
from tidemq.errors import TidemqClientError, TransportError
from tidemq.failover import Attempt
from tidemq.models import Message
from tidemq.options import DEFAULT_STREAM_IDLE_S
from tidemq.sse import EventParser

P = ParamSpec("P")
T = TypeVar("T")


class AsyncClient(ClientBase[AsyncPool]):
    _pool_type = AsyncPool

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()

    def _bind(self, build: Callable[P, Call[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        async def run(*args: P.args, **kwargs: P.kwargs) -> T:
            call = build(*args, **kwargs)
            attempt = self._attempt(call)
            while True:
                try:
                    pool = self._pool_for(attempt.target)
                    result = call.result(await pool.request(call.request, self.timeout_s + call.wait_s))
                    attempt.succeeded()
                    return result
                except TidemqClientError as error:
                    pause = attempt.pause_before_retry(error)
                    if pause is None:
                        raise
                await asyncio.sleep(pause)
                await self._read_route(attempt)

        return run

    async def _read_route(self, attempt: Attempt) -> None:
        """Re-read the route of the call's topic (tidemq.failover) from the first broker that answers."""
        request = attempt.route_request()
        if request is None:
            return
        for url in attempt.route_sources():
            try:
                response = await self._pool_for(url).request(request, self.timeout_s)
            except TransportError:
                continue
            attempt.learn(response)
            return

    async def stream(
        self,
        group: str,
        topic: str,
        *,
        max_in_flight: int = 32,
        invisible_ms: int = 30_000,
        tag: str | None = None,
        idle_timeout_s: float = DEFAULT_STREAM_IDLE_S,
        sql: str | None = None,
    ) -> AsyncIterator[Message]:
        """Received messages as the broker pushes them, at most `max_in_flight` unacked; ack each.
        The generator ends when the broker ends the stream: quietly when it stops, else by raising the
        error its last event names (TOPIC_NOT_FOUND for a deleted topic, Unauthenticated or Forbidden
        when an ACL reload revoked the access, ...). Closing it closes the connection."""
        request = calls.stream_request(group, topic, max_in_flight=max_in_flight, invisible_ms=invisible_ms, tag=tag, sql=sql)
        async with self._pool.stream(request, idle_timeout_s) as (head, pieces):
            if head.status != 200:
                head.body = b"".join([p async for p in pieces])
                raise error_of(head)
            parser = EventParser()
            async for piece in pieces:
                for name, data in parser.feed(piece):
                    if name == "message":
                        yield stream_message(data)
                    elif name == "end":
                        error = stream_end(data)
                        if error is not None:
                            raise error
                        return
