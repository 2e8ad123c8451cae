"""Requests served from a body already read, and replies kept whole: for the Forwarder and SpanningRequests.

Both read a body before they know where it goes (to look inside it, or to send it to several
groups), then hand it to the app again, and merge replies they keep whole (bounded by
`max_forward_body_bytes` on the way in and by the app's own reply limits on the way out).
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope


def replay(body: bytes, then: Receive | None = None) -> Receive:
    """A receive callable that hands an already read body to the app again, then waits as a server's does.

    After the body a server's receive returns only when the client goes away: `then` is the
    original request's receive (its disconnect), or, for a request made here, a wait that never ends
    (the app must not take the missing disconnect for a client that left at once).
    """
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        if then is not None:
            return await then()
        await asyncio.Event().wait()
        raise AssertionError("unreachable: the wait above never ends")

    return receive


async def serve_captured(app: ASGIApp, scope: Scope, body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    status, headers, chunks = 500, [], []

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, replay(body), send)
    return status, headers, b"".join(chunks)
