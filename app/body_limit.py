"""BodyLimit: request bodies are capped in size and in time before they are read whole.

Invariants: a Content-Length over the limit is answered 413 BODY_TOO_LARGE at once, without
reading the body; a body without one (chunked) stops being read as soon as it passes the limit
(BodyTooLarge, mapped to the same problem). JSON bodies have their own, larger limit.
A body must arrive whole within `body_read_timeout_s` of the request's start (a chunked body
that never ends, a Content-Length the client never sends): past it the read raises BodyTimeout,
answered 408 REQUEST_TIMEOUT with the connection closed, and nothing of the request is used.
Once the body is complete, receive() is passed through untimed (a held pull waits on it for
the client's disconnect).
"""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.problems import problem_response


class BodyTooLarge(StarletteHTTPException):
    """Raised when a request body grows past the limit while it is being read."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes")


class BodyTimeout(StarletteHTTPException):
    """Raised when a request body has not arrived whole within the body read timeout."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body did not arrive whole within {timeout_s:g} s", {"Connection": "close"})


class BodyLimit:
    """ASGI middleware capping request bodies (JSON bodies have their own, larger cap)."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_json_bytes: int, body_read_timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_json_bytes = max_json_bytes
        self.body_read_timeout_s = body_read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length: bytes | None = None
        chunked = False
        limit = self.max_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = value
            elif name == b"content-type" and value[:16].lower() == b"application/json":
                limit = self.max_json_bytes
            elif name == b"transfer-encoding":
                chunked = True
        if length is not None:
            if not length.isdigit():
                await problem_response("REQUEST_INVALID", "Content-Length is not a number", scope.get("path"))(scope, receive, send)
                return
            if int(length) > limit:
                detail = f"Content-Length {length[:20].decode('latin-1')} is over the limit of {limit} bytes"
                await problem_response("BODY_TOO_LARGE", detail, scope.get("path"))(scope, receive, send)
                return
            if int(length) == 0:
                await self.app(scope, receive, send)
                return
            limit = -1  # the length is checked: count nothing, only time the body
        elif not chunked:
            await self.app(scope, receive, send)  # no body at all
            return
        await self.app(scope, self._bounded(receive, limit), send)

    def _bounded(self, receive: Receive, limit: int) -> Receive:
        """`receive` with the body's deadline and, when `limit` >= 0, its size cap."""
        timeout_s = self.body_read_timeout_s
        deadline = asyncio.get_running_loop().time() + timeout_s
        seen = 0
        done = False

        async def bounded_receive() -> Message:
            nonlocal seen, done
            if done:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(timeout_s) from None
            if message["type"] == "http.request":
                if limit >= 0:
                    seen += len(message.get("body", b""))
                    if seen > limit:
                        raise BodyTooLarge(limit)
                done = not message.get("more_body", False)
            return message

        return bounded_receive
