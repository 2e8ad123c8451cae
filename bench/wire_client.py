"""One small blocking Python client for both HTTP/1.1 and Redis's RESP, so that a latency comparison of
tidemq and Redis pays the same client-side cost on both sides: a socket with TCP_NODELAY, one `sendall` per
request (head and body together) and a reader of just what the reply's framing needs. The libraries it
stands in for cost unequal amounts (http.client parses every reply head with the email package; redis-py
without hiredis walks RESP in Python), which a delivery latency measured from the send's start to the
consumer holding the message would otherwise count as the server's.

Only what the benchmarks send and receive is read: HTTP replies framed by Content-Length (a chunked reply
is refused), RESP2 values (simple strings, errors, integers, bulk strings, arrays, nulls).
"""

from __future__ import annotations

import socket
from typing import Union

RespValue = Union[bytes, int, None, list["RespValue"], "RespError"]
READ_BYTES = 65_536  # one recv's bound


class RespError(Exception):
    """Raised (or returned inside an array) when Redis answers a command with an error reply."""


class WireConnection:
    """One keep-alive connection to 127.0.0.1:port; `http` and `resp` each send one request and read its reply."""

    def __init__(self, port: int, timeout_s: float = 30.0) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self._start = 0  # where the unread part of the buffer begins

    def close(self) -> None:
        self._sock.close()

    def _fill(self) -> None:
        chunk = self._sock.recv(READ_BYTES)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        if self._start:
            del self._buffer[: self._start]
            self._start = 0
        self._buffer += chunk

    def _line(self) -> bytes:
        """The next CRLF-terminated line, without its CRLF."""
        while (end := self._buffer.find(b"\r\n", self._start)) < 0:
            self._fill()
        line = bytes(self._buffer[self._start : end])
        self._start = end + 2
        return line

    def _exactly(self, count: int) -> bytes:
        while len(self._buffer) - self._start < count:
            self._fill()
        data = bytes(self._buffer[self._start : self._start + count])
        self._start += count
        return data

    def http(self, request: bytes) -> tuple[int, bytes]:
        """Send one whole HTTP/1.1 request (bench.load_generator.http_request) and return its reply's
        status and body."""
        self._sock.sendall(request)
        status = int(self._line().split(b" ", 2)[1])
        length = 0
        while line := self._line():
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                raise ValueError(f"a reply with transfer-encoding {value.strip()!r}: only Content-Length is read")
        return status, self._exactly(length)

    def resp(self, command: bytes) -> RespValue:
        """Send one RESP command (bench.load_generator.resp_command) and return its reply; an error reply
        raises RespError."""
        self._sock.sendall(command)
        reply = self._value()
        if isinstance(reply, RespError):
            raise reply
        return reply

    def _value(self) -> RespValue:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            return RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self._exactly(size + 2)
            return data[:-2]
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self._value() for _ in range(size)]
        if kind == b"_":
            return None
        raise ValueError(f"a RESP reply of kind {kind!r}: only RESP2 is read")
