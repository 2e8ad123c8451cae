"""The async client's HTTP/1.1 transport: a pool of keep-alive connections, each an asyncio
Protocol that feeds the bytes it receives to httptools' parser (no stream reader, no task per
request: the reply completes a future from `data_received`).

Invariants: at most `max_connections` requests are under way at once (a semaphore; the others
wait their turn); a connection carries one request at a time and goes back to the idle list only
after a complete reply the broker kept alive; an idle connection older than `idle_expiry_s` is
closed rather than used (the broker closes idle connections after its keep-alive timeout). A
request that fails on a reused connection before any byte of a reply arrived is sent once more on
a new connection: the broker closes a keep-alive connection only between requests, so it never
handled the first copy. Every wait is bounded by the call's timeout.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from typing import cast

from tidemq.errors import ConnectFailed, ConnectionClosed, ProtocolError, Timeout, TransportError
from tidemq.http_wire import Request, Response, ResponseReader, WireError, encode_request
from tidemq.pool_settings import PoolSettings

# Streamed body bytes buffered before the connection stops reading (flow control).
STREAM_HIGH_WATER_BYTES = 1024 * 1024


class NothingReceived(ConnectionClosed):
    """Raised when the connection closed before any byte of the reply: the broker did not handle the request."""


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader: ResponseReader | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.pieces: collections.deque[bytes] = collections.deque()
        self.piece_bytes = 0
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        if reader is None:  # bytes nobody asked for: the connection cannot be trusted
            self._fail(ProtocolError("bytes received with no request under way"))
            return
        try:
            reader.feed(data)
        except WireError as e:
            self._fail(ProtocolError(e.detail))
            return
        if reader.complete or reader.on_piece is not None:
            self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionClosed(f"the broker closed the connection{f': {exc}' if exc else ''}"))

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: TransportError) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def on_piece(self, piece: bytes) -> None:
        self.pieces.append(piece)
        self.piece_bytes += len(piece)
        if self.piece_bytes > STREAM_HIGH_WATER_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def take_pieces(self) -> list[bytes]:
        out = list(self.pieces)
        self.pieces.clear()
        self.piece_bytes = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return out

    async def exchange(self, request: Request, head: str, headers: dict[str, str], timeout_s: float) -> Response:
        """Send one request and wait for its complete reply (the caller owns the connection)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.reader = reader = ResponseReader()
        self.waiter = waiter = loop.create_future()
        self.transport.writelines(encode_request(request, head, headers))
        timer = loop.call_later(timeout_s, self._fail, Timeout(f"no complete reply within {timeout_s:g} s"))
        try:
            await waiter
        except ConnectionClosed as e:
            if not reader.got_bytes:
                raise NothingReceived(str(e)) from e
            raise
        except BaseException:
            self.close()  # cancelled or failed mid-request: the connection's state is unknown
            raise
        finally:
            timer.cancel()
            self.waiter = None
            self.reader = None
        if not reader.keep_alive():
            self.close()
        return reader.response()


class AsyncPool(PoolSettings):
    """Keep-alive connections to one broker."""

    def _start(self, max_connections: int) -> None:
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _transport, conn = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl_context)
        except TimeoutError as e:
            raise ConnectFailed(f"{self.host}:{self.port}: no connection within {self.connect_timeout_s:g} s") from e
        except (OSError, ssl.SSLError) as e:
            raise ConnectFailed(f"{self.host}:{self.port}: {e}") from e
        return conn

    def _take_idle(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < self.idle_expiry_s:
                return conn
            conn.close()
        return None

    def _put_back(self, conn: _Connection) -> None:
        if conn.closed or self._closed:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    async def request(self, request: Request, timeout_s: float) -> Response:
        if self._closed:
            raise ConnectionClosed("the client is closed")
        async with self._slots:
            conn = self._take_idle()
            if conn is not None:
                try:
                    response = await conn.exchange(request, self.host_header, self.headers, timeout_s)
                except NothingReceived:
                    pass  # closed by the broker while idle: send again on a new connection
                else:
                    self._put_back(conn)
                    return response
            conn = await self._connect()
            response = await conn.exchange(request, self.host_header, self.headers, timeout_s)
            self._put_back(conn)
            return response

    @contextlib.asynccontextmanager
    async def stream(self, request: Request, idle_timeout_s: float) -> AsyncIterator[tuple[Response, AsyncIterator[bytes]]]:
        """A request whose reply body is read piece by piece; the connection is not reused."""
        async with self._slots:
            conn = await self._connect()
            try:
                yield await self._open_stream(conn, request, idle_timeout_s)
            finally:
                conn.close()

    async def _open_stream(self, conn: _Connection, request: Request, idle_timeout_s: float) -> tuple[Response, AsyncIterator[bytes]]:
        assert conn.transport is not None
        loop = asyncio.get_running_loop()
        conn.reader = reader = ResponseReader(on_piece=conn.on_piece)
        conn.transport.writelines(encode_request(request, self.host_header, self.headers))

        async def wait_for_bytes() -> None:
            conn.waiter = loop.create_future()
            timer = loop.call_later(idle_timeout_s, conn._fail, Timeout(f"nothing received for {idle_timeout_s:g} s"))
            try:
                await conn.waiter
            finally:
                timer.cancel()
                conn.waiter = None

        while not reader.headers_done:
            await wait_for_bytes()
        head = Response(reader.status, reader.headers, b"")

        async def pieces() -> AsyncIterator[bytes]:
            while True:
                for piece in conn.take_pieces():
                    yield piece
                if reader.complete:
                    return
                await wait_for_bytes()

        return head, pieces()

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()
