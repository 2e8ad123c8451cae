"""BodyLimit: request bodies are capped in size, and a body that stopped arriving is answered 408.

`body_limit` decides from a request's headers; `BodyLimit` applies it as middleware (the FastAPI app's),
app.hot_routes applies it itself. Invariants: a Content-Length over the limit is answered 413 BODY_TOO_LARGE at once, without
reading the body; a body without one (chunked) stops being read as soon as it passes the limit
(BodyTooLarge, mapped to the same problem). JSON bodies and binary batches
(application/x-tidemq-batch, or application/octet-stream to `.../messages/batch`) have their own, larger limit.
The connection (app.connections) times the body: when it has not arrived whole within the body
read timeout, the connection marks the request's scope with `BODY_TIMED_OUT` and wakes the
pending receive(); the next receive() through here raises BodyTimeout, answered 408
REQUEST_TIMEOUT (connection closed) through the one error table, and nothing of the request is
used. A request whose body arrives with its headers pays for no timer at all.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.problems import ProblemReply


class BodyTooLarge(StarletteHTTPException):
    """Raised when a request body grows past the limit while it is being read."""

    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes, the broker's {setting} ({SETTING_SCOPE[setting]})")


# The broker settings that cap bodies, and which bodies each caps (named in 413 replies).
REQUEST_LIMIT = "max_request_body_bytes"
JSON_LIMIT = "max_json_body_bytes"
SETTING_SCOPE = {
    REQUEST_LIMIT: "bodies other than JSON and binary batches: a raw message",
    JSON_LIMIT: "JSON bodies and binary batches",
}


# Content-Type prefixes of the bodies capped by max_json_bytes: JSON and binary batches.
BATCH_TYPES = (b"application/json", b"application/x-tidemq-batch")
# produceBinaryBatch's path takes a binary batch sent as application/octet-stream too (app.routes_produce).
OCTET_STREAM = b"application/octet-stream"
BATCH_PATH_SUFFIX = "/messages/batch"
# Scope key set (to the timeout in seconds) by the connection when the request's body did not arrive in time.
BODY_TIMED_OUT = "tidemq.body_timed_out"


class BodyTimeout(StarletteHTTPException):
    """Raised when a request body has not arrived whole within the body read timeout."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body did not arrive whole within {timeout_s:g} s", {"Connection": "close"})


class Limit:
    """What `body_limit` decided for one request: a refusal (problem code and detail) or the cap to read the body under."""

    __slots__ = ("refusal", "limit", "setting")

    def __init__(self, refusal: tuple[str, str] | None, limit: int, setting: str) -> None:
        self.refusal = refusal
        self.limit = limit  # bytes a body may have while it is read; -1: its Content-Length was checked, count nothing
        self.setting = setting  # the broker setting `limit` comes from, named in a 413


NO_BODY = Limit(None, -1, REQUEST_LIMIT)


def body_limit(scope: Scope, max_bytes: int, max_json_bytes: int) -> Limit:
    """The request's body limit from its headers: refused at once (400 for a Content-Length that is not a
    number, 413 past the limit), or the cap its reading is held to."""
    length: bytes | None = None
    chunked = False
    limit = max_bytes
    setting = REQUEST_LIMIT
    for name, value in scope["headers"]:
        if name == b"content-length":
            length = value
        elif name == b"content-type":
            media = value[:26].lower()
            if media.startswith(BATCH_TYPES) or (media.startswith(OCTET_STREAM) and scope["path"].endswith(BATCH_PATH_SUFFIX)):
                limit = max_json_bytes
                setting = JSON_LIMIT
        elif name == b"transfer-encoding":
            chunked = True
    if length is not None:
        if not length.isdigit():
            return Limit(("REQUEST_INVALID", "Content-Length is not a number"), -1, setting)
        if int(length) > limit:
            detail = (
                f"Content-Length {length[:20].decode('latin-1')} is over the limit of {limit} bytes, the broker's {setting} "
                f"({SETTING_SCOPE[setting]}); send less, or raise {setting} in the [broker] settings"
            )
            return Limit(("BODY_TOO_LARGE", detail), -1, setting)
        return Limit(None, -1, setting)  # the length is checked: count nothing, only time the body
    if not chunked:
        return NO_BODY
    return Limit(None, limit, setting)


class BodyLimit:
    """ASGI middleware capping request bodies (JSON and binary batch bodies have their own, larger cap)."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_json_bytes: int, problem: ProblemReply) -> None:
        self.app = app
        self.problem = problem
        self.max_bytes = max_bytes
        self.max_json_bytes = max_json_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        decided = body_limit(scope, self.max_bytes, self.max_json_bytes)
        if decided.refusal is not None:
            await self.problem(*decided.refusal, scope.get("path"), None)(scope, receive, send)
            return
        if decided is NO_BODY:
            await self.app(scope, receive, send)  # no body at all
            return
        await self.app(scope, bounded(scope, receive, decided.limit, decided.setting), send)


def bounded(scope: Scope, receive: Receive, limit: int, setting: str) -> Receive:
    """`receive` raising BodyTimeout once the connection marked the body late and, when `limit` >= 0, capped."""
    seen = 0

    async def bounded_receive() -> Message:
        nonlocal seen
        message = await receive()
        timed_out = scope.get(BODY_TIMED_OUT)
        if timed_out:
            raise BodyTimeout(timed_out)
        if limit >= 0 and message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit, setting)
        return message

    return bounded_receive
