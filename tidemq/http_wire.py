"""HTTP/1.1 on the wire, shared by the sync and the async connection: a request's bytes, and a
response read by httptools' parser (the llhttp parser uvicorn uses) fed whatever bytes arrive.

Invariants: a `ResponseReader` is fed one response's bytes at a time; it says `complete` only once
the parser reached the end of the message (Content-Length or the last chunk), and keeps at most
`MAX_RESPONSE_BODY_BYTES` of a body it collects (a longer one is a protocol error). In streaming mode it
collects nothing: each body piece goes to the `on_piece` callback as the parser decodes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

import httptools

from tidemq.errors import TidemqClientError

# The most body bytes a collected response may have (a pull of 1,024 messages of 4 MiB total fits).
MAX_RESPONSE_BODY_BYTES = 64 * 1024 * 1024
# The most header bytes a response may have.
MAX_RESPONSE_HEADER_BYTES = 64 * 1024

# Bodies below this are copied behind the head so the request leaves in one write.
COALESCE_BODY_BYTES = 65536

QueryValue = str | int | None
Query = dict[str, QueryValue]


class WireError(TidemqClientError):
    """Raised when the peer breaks HTTP/1.1 (unparseable bytes, a body or headers over the caps); the
    transports answer it as a ProtocolError."""

    def __init__(self, detail: str) -> None:
        super().__init__("BAD_HTTP", None, detail)


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name, default)


@dataclass(slots=True)
class Request:
    method: str
    path: str  # already quoted
    query: Query = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def target(self) -> str:
        params = {k: v for k, v in self.query.items() if v is not None}
        return self.path + ("?" + urlencode(params, safe="|,") if params else "")


def path(*segments: str) -> str:
    """A path from segments, each percent-encoded (a topic may hold `%` and `|`)."""
    return "/" + "/".join(quote(s, safe="") for s in segments)


def encode_request(request: Request, host_header: str, extra_headers: dict[str, str]) -> list[bytes]:
    """The request's bytes: one buffer, or the head and a large body apart (not copied together)."""
    lines = [f"{request.method} {request.target} HTTP/1.1\r\nhost: {host_header}\r\n"]
    for name, value in extra_headers.items():
        lines.append(f"{name}: {value}\r\n")
    for name, value in request.headers.items():
        lines.append(f"{name}: {value}\r\n")
    if request.body or request.method in ("POST", "PUT"):
        lines.append(f"content-length: {len(request.body)}\r\n")
    lines.append("\r\n")
    head = "".join(lines).encode("latin-1")
    if len(request.body) < COALESCE_BODY_BYTES:
        return [head + request.body]
    return [head, request.body]


class ResponseReader:
    """One response's parser state; `feed` it bytes until `complete`."""

    __slots__ = (
        "_parser",
        "_headers",
        "_header_bytes",
        "_body",
        "_body_bytes",
        "complete",
        "headers_done",
        "on_piece",
        "got_bytes",
        "_keep_alive",
    )

    def __init__(self, on_piece: Callable[[bytes], None] | None = None) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._body: list[bytes] = []
        self._body_bytes = 0
        self.complete = False
        self.headers_done = False
        self._keep_alive = False
        self.got_bytes = False  # any byte of a response arrived (a request is then never sent again)
        self.on_piece = on_piece

    def feed(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            raise WireError(f"unparseable response: {e}") from e

    # httptools' callbacks.
    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_RESPONSE_HEADER_BYTES:
            raise WireError("response headers over the cap")
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True
        # Asked here: llhttp forgets the connection's keep-alive state once the message is complete.
        self._keep_alive = bool(self._parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if self.on_piece is not None:
            self.on_piece(body)
            return
        self._body_bytes += len(body)
        if self._body_bytes > MAX_RESPONSE_BODY_BYTES:
            raise WireError("response body over the cap")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    @property
    def headers(self) -> dict[str, str]:
        return self._headers

    @property
    def status(self) -> int:
        return int(self._parser.get_status_code())

    def keep_alive(self) -> bool:
        return self._keep_alive

    def response(self) -> Response:
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        return Response(self.status, self._headers, body)
