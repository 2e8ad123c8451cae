"""BodyLimit: request bodies are capped before they are read whole.

Invariants: a Content-Length over the limit is answered 413 BODY_TOO_LARGE at once, without
reading the body; a body without one (chunked) stops being read as soon as it passes the limit
(BodyTooLarge, mapped to the same problem). JSON bodies have their own, larger limit.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.problems import problem_response


class BodyTooLarge(StarletteHTTPException):
    """Raised when a request body grows past the limit while it is being read."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes")


class BodyLimit:
    """ASGI middleware capping request bodies (JSON bodies have their own, larger cap)."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_json_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_json_bytes = max_json_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length: bytes | None = None
        limit = self.max_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = value
            elif name == b"content-type" and value[:16].lower() == b"application/json":
                limit = self.max_json_bytes
        if length is not None:
            if not length.isdigit():
                await problem_response("REQUEST_INVALID", "Content-Length is not a number", scope.get("path"))(scope, receive, send)
                return
            if int(length) > limit:
                detail = f"Content-Length {length[:20].decode('latin-1')} is over the limit of {limit} bytes"
                await problem_response("BODY_TOO_LARGE", detail, scope.get("path"))(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        seen = 0

        async def capped_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, capped_receive, send)
