"""PushOrigin: keep-alive HTTP/1.1 connections to one push target (scheme, host, port), for POSTs
whose reply matters only by its status.

Why not a general HTTP client: a delivery needs the status line and nothing else, and must bound
what a receiver can make the broker hold; httpx's pool spent about as much CPU per request as the
rest of a delivery (its connection bookkeeping and socket checks run per request). This one is an
asyncio Protocol fed to httptools' parser, as tidemq's own client transport is.

Bounds and rules: at most `connections` requests under way (a semaphore the caller takes before its
deadline starts: `slots`); a reply's body is counted and dropped, and past MAX_REPLY_BYTES the
connection is closed (the status stands); a connection goes back to the idle list only after a
complete reply the receiver kept alive, and an idle one older than IDLE_EXPIRY_S is closed instead
of used; a request that fails on a reused connection before any byte of a reply arrived is sent
once more on a new connection (the receiver closed it while idle and never saw the request). No
proxy, no redirect (a 3xx is a status like any other); TLS with the system's CAs and host name
check.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import cast

import httptools

from core import TidemqError

# Reply body bytes read (and dropped) so the connection can be reused; past it the connection closes.
MAX_REPLY_BYTES = 4_096
# Reply header bytes accepted at most.
MAX_REPLY_HEADER_BYTES = 16_384
# How long an idle connection is kept for the next delivery (receivers close idle ones too).
IDLE_EXPIRY_S = 4.0


class PushConnectionError(TidemqError):
    """Raised when a delivery got no status line: connection refused, reset or closed, TLS failure, a garbled reply."""


class _Reply(asyncio.Protocol):
    """One connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.done: asyncio.Future[int] | None = None
        self.status = 0
        self.header_bytes = 0
        self.body_bytes = 0
        self.got_bytes = False
        self.keep_alive = False
        self.complete = False
        self.closed = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.done is None:  # bytes while idle: nobody asked, the connection cannot be trusted
            self.close()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._finish(PushConnectionError(f"unparseable reply: {e}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._finish(PushConnectionError(f"connection closed{f': {exc}' if exc else ''}"))

    # httptools' callbacks.
    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value)
        if self.header_bytes > MAX_REPLY_HEADER_BYTES:
            self._finish(PushConnectionError("reply headers over the cap"))

    def on_headers_complete(self) -> None:
        self.status = int(self.parser.get_status_code())
        self.keep_alive = bool(self.parser.should_keep_alive())  # asked here: llhttp forgets it once the message is complete

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)
        if self.body_bytes > MAX_REPLY_BYTES:
            self.keep_alive = False
            self._finish(self.status)  # the status is known; the rest is not read

    def on_message_complete(self) -> None:
        self.complete = True
        self._finish(self.status)

    def _finish(self, outcome: int | Exception) -> None:
        done = self.done
        if done is None or done.done():
            return
        if isinstance(outcome, Exception):
            self.keep_alive = False
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    async def exchange(self, payload: list[bytes]) -> int:
        """Send one request; its reply's status."""
        assert self.transport is not None and self.done is None
        self.done = asyncio.get_running_loop().create_future()
        self.status = self.header_bytes = self.body_bytes = 0
        self.got_bytes = self.complete = False
        try:
            self.transport.writelines(payload)
            return await self.done
        finally:
            self.done = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class PushOrigin:
    """The connections to one target, shared by the subscriptions whose URLs name it."""

    def __init__(self, scheme: str, host: str, port: int, connections: int) -> None:
        self.host, self.port = host, port
        self.ssl_context = ssl.create_default_context() if scheme == "https" else None
        name = f"[{host}]" if ":" in host else host
        self.host_header = name if port == (443 if scheme == "https" else 80) else f"{name}:{port}"
        self.slots = asyncio.Semaphore(connections)  # taken by the caller, before the delivery's deadline starts
        self.busy = 0  # deliveries under way or waiting for a slot
        self._idle: list[_Reply] = []

    async def post(self, target: str, headers: dict[str, str], body: bytes) -> int:
        """POST and return the status; PushConnectionError without one. The caller holds a slot and bounds the time."""
        head = [f"POST {target} HTTP/1.1\r\nhost: {self.host_header}\r\n"]
        head += [f"{name}: {value}\r\n" for name, value in headers.items()]
        head.append(f"content-length: {len(body)}\r\n\r\n")
        payload = ["".join(head).encode("latin-1"), body]
        conn = self._take_idle()
        if conn is not None:
            try:
                return await self._exchange(conn, payload)
            except PushConnectionError:
                if conn.got_bytes:
                    raise
                # closed by the receiver while idle: it never saw the request; send it once more, new
        return await self._exchange(await self._connect(), payload)

    async def _exchange(self, conn: _Reply, payload: list[bytes]) -> int:
        try:
            status = await conn.exchange(payload)
        except BaseException:
            conn.close()  # failed, cancelled or timed out mid-request: the connection's state is unknown
            raise
        if conn.keep_alive and conn.complete and not conn.closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
        return status

    async def _connect(self) -> _Reply:
        loop = asyncio.get_running_loop()
        try:
            _transport, conn = await loop.create_connection(_Reply, self.host, self.port, ssl=self.ssl_context)
        except (OSError, ssl.SSLError) as e:
            raise PushConnectionError(f"cannot connect to {self.host_header}: {e}") from e
        return conn

    def _take_idle(self) -> _Reply | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_EXPIRY_S:
                return conn
            conn.close()
        return None

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
