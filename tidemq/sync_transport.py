"""The sync client's HTTP/1.1 transport: a thread-safe pool of keep-alive sockets, replies read
by httptools' parser (the same `ResponseReader` as the async transport).

Invariants: as in `tidemq.async_transport`: at most `max_connections` requests at once (the other
threads wait, at most the call's timeout); a socket carries one request at a time and returns to
the pool only after a complete kept-alive reply; idle sockets older than `idle_expiry_s` are
closed; a request that fails on a reused socket before any reply byte is sent once more on a new
one. Every socket operation is bounded by the call's timeout.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator

from tidemq.errors import ConnectFailed, ConnectionClosed, ProtocolError, Timeout
from tidemq.http_wire import Request, Response, ResponseReader, WireError, encode_request
from tidemq.pool_settings import PoolSettings

# Bytes asked of the socket per read.
READ_BYTES = 256 * 1024


class NothingReceived(ConnectionClosed):
    """Raised when the socket closed before any byte of the reply: the broker did not handle the request."""


class _Connection:
    __slots__ = ("sock", "idle_since")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.idle_since = 0.0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, request: Request, host_header: str, headers: dict[str, str], timeout_s: float) -> None:
        self.sock.settimeout(timeout_s)
        try:
            for buf in encode_request(request, host_header, headers):
                self.sock.sendall(buf)
        except TimeoutError as e:
            raise Timeout(f"could not send within {timeout_s:g} s") from e
        except OSError as e:
            raise NothingReceived(f"the broker closed the connection: {e}") from e

    def read_into(self, reader: ResponseReader, deadline: float | None, idle_timeout_s: float | None) -> None:
        """Read until the reader has something new: a complete reply, or (streaming) any piece."""
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout("no complete reply in time")
            self.sock.settimeout(left)
        else:
            self.sock.settimeout(idle_timeout_s)
        try:
            data = self.sock.recv(READ_BYTES)
        except TimeoutError as e:
            raise Timeout("no reply in time") from e
        except OSError as e:
            closed = NothingReceived if not reader.got_bytes else ConnectionClosed
            raise closed(f"the broker closed the connection: {e}") from e
        if not data:
            closed = NothingReceived if not reader.got_bytes else ConnectionClosed
            raise closed("the broker closed the connection")
        try:
            reader.feed(data)
        except WireError as e:
            raise ProtocolError(e.detail) from e

    def exchange(self, request: Request, host_header: str, headers: dict[str, str], timeout_s: float) -> tuple[Response, bool]:
        """One request and its complete reply, and whether the connection stays usable."""
        deadline = time.monotonic() + timeout_s
        self.send(request, host_header, headers, timeout_s)
        reader = ResponseReader()
        while not reader.complete:
            self.read_into(reader, deadline, None)
        return reader.response(), reader.keep_alive()


class SyncPool(PoolSettings):
    """Keep-alive sockets to one broker, shared by threads."""

    def _start(self, max_connections: int) -> None:
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_connections)

    def _connect(self) -> _Connection:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        except TimeoutError as e:
            raise ConnectFailed(f"{self.host}:{self.port}: no connection within {self.connect_timeout_s:g} s") from e
        except OSError as e:
            raise ConnectFailed(f"{self.host}:{self.port}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            try:
                sock = self.ssl_context.wrap_socket(sock, server_hostname=self.host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise ConnectFailed(f"{self.host}:{self.port}: TLS: {e}") from e
        return _Connection(sock)

    def _take_idle(self) -> _Connection | None:
        now = time.monotonic()
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if now - conn.idle_since < self.idle_expiry_s:
                    return conn
                conn.close()
        return None

    def _put_back(self, conn: _Connection, keep: bool) -> None:
        with self._lock:
            if keep and not self._closed:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
                return
        conn.close()

    @contextlib.contextmanager
    def _slot(self, timeout_s: float) -> Iterator[None]:
        if not self._slots.acquire(timeout=timeout_s):
            raise Timeout(f"no free connection within {timeout_s:g} s")
        try:
            yield
        finally:
            self._slots.release()

    def request(self, request: Request, timeout_s: float) -> Response:
        if self._closed:
            raise ConnectionClosed("the client is closed")
        with self._slot(timeout_s):
            conn = self._take_idle()
            if conn is not None:
                try:
                    response, keep = conn.exchange(request, self.host_header, self.headers, timeout_s)
                except NothingReceived:
                    conn.close()  # closed by the broker while idle: send again on a new connection
                except BaseException:
                    conn.close()
                    raise
                else:
                    self._put_back(conn, keep)
                    return response
            conn = self._connect()
            try:
                response, keep = conn.exchange(request, self.host_header, self.headers, timeout_s)
            except BaseException:
                conn.close()
                raise
            self._put_back(conn, keep)
            return response

    @contextlib.contextmanager
    def stream(self, request: Request, idle_timeout_s: float) -> Iterator[tuple[Response, Iterator[bytes]]]:
        """A request whose reply body is read piece by piece; the socket is not reused."""
        with self._slot(idle_timeout_s):
            conn = self._connect()
            try:
                yield self._open_stream(conn, request, idle_timeout_s)
            finally:
                conn.close()

    def _open_stream(self, conn: _Connection, request: Request, idle_timeout_s: float) -> tuple[Response, Iterator[bytes]]:
        pending: list[bytes] = []
        reader = ResponseReader(on_piece=pending.append)
        conn.send(request, self.host_header, self.headers, idle_timeout_s)
        while not reader.headers_done:
            conn.read_into(reader, None, idle_timeout_s)
        head = Response(reader.status, reader.headers, b"")

        def pieces() -> Iterator[bytes]:
            while True:
                while pending:
                    yield pending.pop(0)
                if reader.complete:
                    return
                conn.read_into(reader, None, idle_timeout_s)

        return head, pieces()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
