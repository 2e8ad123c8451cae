"""DispatchBarrier: the produces of one event-loop turn dispatched in one pass, before any reply leaves.

A put's messages are dispatched (consume-queue and index entries written, held pulls woken) before
the put is answered, so a client that has the answer finds them. Done per put, that pass has a
fixed cost larger than the rest of the put's own (the layers of the dispatch lock, the cursor,
the file, the scan), and under load many produces are served in one turn of the loop. So a produce
whose reply is written through a ReplyTransport (app.reply_transport: every connection the server
accepts) puts with `defer_dispatch` and owes its dispatch here:

- `owe()` schedules one `run` for the turn (`call_soon`), which dispatches what every put of the
  turn left owed (store `dispatch_owed`), and wakes the held pulls of their queues;
- a ReplyTransport calls `run_pending()` before it writes: a reply never leaves while a deferred
  put made before the write is still owed, whatever order the loop runs its callbacks in.

A request that reaches the app some other way (an in-process ASGI client: no ReplyTransport) is not
marked (`BARRIER_KEY` absent from its scope) and its put dispatches inline, as every other put does.

A pass that woke held pulls (or held receives) marks its turn (`woke`, cleared by the next turn): a
produce's reply written in that turn yields to theirs (app.reply_transport: `write_yielding`). Their
continuations run in the next turn and their replies are flushed in the one after, while the produce's
own reply on loopback wakes its producer, a cost the consumer would otherwise wait behind; so the
consumer of a message hears of it first, and the producer at most two turns later.

A held pull answered with the message a put lane has just stored (app.long_poll `deliver`) is the one reply
written before a pending pass: its continuation was scheduled before the pass, the pass runs next in
the same turn, and the loop reads no request before it has run (app.reply_transport `write_now`, `early`).

Invariants: owed dispatch is run on the event loop's thread only; after `run` returns, every put
that owed it before the call is dispatched (or dispatch is failing, when the store refuses puts and
its thread retries); a write through a ReplyTransport runs a pending `run` first, but an early reply's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# The scope key under which a request served by the server's protocol carries the server's barrier.
BARRIER_KEY = "tidemq.dispatch_barrier"


class DispatchBarrier:
    __slots__ = ("_dispatch_owed", "_woken", "_loop", "pending", "runs", "woke")

    def __init__(self, dispatch_owed: Callable[[], int], woken: Callable[[], int] | None = None) -> None:
        self._dispatch_owed = dispatch_owed
        self._woken = woken  # held requests woken so far (app.long_poll: HeldPulls.woken_total); None: never `woke`
        # The server's loop (`bind`, at its start): asyncio.get_running_loop() makes a getpid() system call each time,
        # and `owe` runs once a loop turn with puts. Unbound, the running loop is asked.
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pending = False  # a run is scheduled and has not run yet
        self.runs = 0  # passes run (tests and benchmarks: puts per pass)
        self.woke = False  # a pass of this loop turn woke held requests (cleared by the next turn)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule passes on `loop`, the server's (called on it when the server starts)."""
        self._loop = loop

    def owe(self) -> None:
        """A put was made with `defer_dispatch`: its dispatch runs at the end of this turn, before its reply."""
        if not self.pending:
            self.pending = True
            (self._loop or asyncio.get_running_loop()).call_soon(self.run)

    def run(self) -> None:
        """Dispatch what the puts owe (the scheduled pass; a reply's write runs it first when still pending)."""
        if self.pending:
            self.pending = False
            self.runs += 1
            woken = self._woken
            if woken is None:
                self._dispatch_owed()
                return
            before = woken()
            self._dispatch_owed()
            if woken() != before and not self.woke:
                self.woke = True
                (self._loop or asyncio.get_running_loop()).call_soon(self._turn_over)

    def _turn_over(self) -> None:
        self.woke = False

    def run_pending(self) -> None:
        """Before a reply is written: the pass, when one is pending."""
        if self.pending:
            self.run()
