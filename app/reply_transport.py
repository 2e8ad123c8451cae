"""ReplyTransport: one socket write per HTTP reply instead of one per ASGI message.

uvicorn writes a response's status line and headers when the app sends `http.response.start`
and its body on `http.response.body`: two `send()` system calls and two TCP segments per reply
on a TCP_NODELAY socket, and on loopback each one runs the receiver's side of the stack too
(the head write was the largest single item of a produce's server time). This wrapper holds
what is written during one turn of the event loop and writes it with one call at the end of
that turn, so a reply sent by one task step (every route here sends head and body without
waiting in between) leaves in one segment. It never delays a write past the current turn;
a write over JOIN_MAX_BYTES is not held or copied. Before anything is written the server's
dispatch barrier runs when a pass is pending (app.dispatch_barrier): no reply leaves before the
produces made before it are dispatched.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.dispatch_barrier import DispatchBarrier

# Writes up to this size are held to be joined; a larger one (a big body: many segments anyway) is written at once.
JOIN_MAX_BYTES = 64 * 1024


class ReplyTransport:
    """A transport whose writes within one loop turn are joined; everything else is the wrapped transport's."""

    __slots__ = ("_transport", "_loop", "_pending", "_scheduled", "_barrier")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, barrier: DispatchBarrier | None = None) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._scheduled = False
        self._barrier = barrier  # run before a write when a pass is pending

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if len(data) > JOIN_MAX_BYTES:  # a large body: what is held goes first, then the body, now
            self.flush()
            if self._barrier is not None and self._barrier.pending:
                self._barrier.run()
            if not self._transport.is_closing():
                self._transport.write(data)
            return
        self._pending.append(bytes(data))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what is held, in order, with one call."""
        self._scheduled = False
        pending, self._pending = self._pending, []
        if not pending or self._transport.is_closing():
            return
        if self._barrier is not None and self._barrier.pending:
            self._barrier.run()
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def is_closing(self) -> bool:  # read for every reply: not through __getattr__
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(p) for p in self._pending)

    def close(self) -> None:
        self.flush()  # what was sent before the close is still delivered, as by the wrapped transport
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
