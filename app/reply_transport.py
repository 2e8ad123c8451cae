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

A produce's reply is written with `write_yielding`: when the turn's dispatch pass woke held pulls or
receives (the barrier's `woke`), what the connection holds is written YIELD_TURNS turns later, after
the woken requests' replies (theirs continue in the next turn and are flushed in the one after). A
close, a write past JOIN_MAX_BYTES or the end of writing flush at once, yielding or not: nothing is
reordered or lost.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.dispatch_barrier import DispatchBarrier

# The scope key a held pull's reply carries when the put of its message answered it before its dispatch pass
# (app.long_poll `deliver`): written by `write_now` without running that pass first.
EARLY_REPLY_KEY = "tidemq.early_reply"
# Writes up to this size are held to be joined; a larger one (a big body: many segments anyway) is written at once.
JOIN_MAX_BYTES = 64 * 1024
# Turns a yielding reply waits when its turn's dispatch pass woke held requests: theirs are written in the second.
YIELD_TURNS = 2


class ReplyTransport:
    """A transport whose writes within one loop turn are joined; everything else is the wrapped transport's."""

    __slots__ = ("_transport", "_loop", "_pending", "_scheduled", "_barrier", "_yielding", "_yield_turns")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, barrier: DispatchBarrier | None = None) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._scheduled = False
        self._barrier = barrier  # run before a write when a pass is pending
        self._yielding = False  # what is held holds a produce's reply (`write_yielding`)
        self._yield_turns = 0  # turns the held writes still wait for woken requests' replies

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if len(data) > JOIN_MAX_BYTES:  # a large body: what is held goes first, then the body, now
            self._flush_now()
            if self._barrier is not None and self._barrier.pending:
                self._barrier.run()
            if not self._transport.is_closing():
                self._transport.write(data)
            return
        self._pending.append(bytes(data))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def write_yielding(self, data: bytes) -> None:
        """`write` a produce's reply (bytes), which yields to the replies of held requests its turn's dispatch woke."""
        if len(data) > JOIN_MAX_BYTES:
            self.write(data)
            return
        self._yielding = True
        self._pending.append(data)  # `write`'s small case, one frame fewer (every produce)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def write_now(self, data: bytes, early: bool = False) -> None:
        """Write `data` after what is held, now: a reply released by a durability wait's end (app.held_reply),
        whose dispatch ran turns before, so it has nothing to yield to or wait for in this turn, or a woken held
        request's. `early`: a held pull's reply of the message a put on this loop turn delivered to it (app.long_poll
        `deliver`), written before that put's pass, which the put scheduled in this turn after the pull's continuation:
        the pass runs before the loop reads anything more, so no request sent after this reply arrives before it."""
        if self._pending:
            self._pending.append(data)
            self._flush_now()
            return
        # `_flush_now` of `data` alone, written out (every held reply): no list made and joined.
        self._yielding = False
        self._yield_turns = 0
        transport = self._transport
        if transport.is_closing():
            return
        barrier = self._barrier
        if barrier is not None and barrier.pending and not early:
            barrier.run()
        transport.write(data)

    def flush(self) -> None:
        """Write what is held, in order, with one call (the scheduled call at a turn's end), after the turn's
        dispatch pass; a produce's reply YIELD_TURNS turns later when that pass woke held requests."""
        self._scheduled = False
        pending = self._pending
        if not pending:
            return
        barrier = self._barrier
        if barrier is not None:
            if barrier.pending:
                barrier.run()
            if self._yielding:
                self._yielding = False
                if barrier.woke:
                    self._yield_turns = YIELD_TURNS
            if self._yield_turns:
                self._yield_turns -= 1
                self._scheduled = True
                self._loop.call_soon(self.flush)
                return
        self._pending = []
        if not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def _flush_now(self) -> None:
        """Write what is held, yielding or not (a close, a large write, the scheduled flush)."""
        self._yielding = False
        self._yield_turns = 0
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
        self._flush_now()  # what was sent before the close is still delivered, as by the wrapped transport
        self._transport.close()

    def write_eof(self) -> None:
        self._flush_now()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
