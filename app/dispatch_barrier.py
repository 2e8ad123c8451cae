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

Invariants: owed dispatch is run on the event loop's thread only; after `run` returns, every put
that owed it before the call is dispatched (or dispatch is failing, when the store refuses puts and
its thread retries); a write through a ReplyTransport runs a pending `run` first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# The scope key under which a request served by the server's protocol carries the server's barrier.
BARRIER_KEY = "tidemq.dispatch_barrier"


class DispatchBarrier:
    __slots__ = ("_dispatch_owed", "pending", "runs")

    def __init__(self, dispatch_owed: Callable[[], int]) -> None:
        self._dispatch_owed = dispatch_owed
        self.pending = False  # a run is scheduled and has not run yet
        self.runs = 0  # passes run (tests and benchmarks: puts per pass)

    def owe(self) -> None:
        """A put was made with `defer_dispatch`: its dispatch runs at the end of this turn, before its reply."""
        if not self.pending:
            self.pending = True
            asyncio.get_running_loop().call_soon(self.run)

    def run(self) -> None:
        """Dispatch what the puts owe (the scheduled pass; a reply's write runs it first when still pending)."""
        if self.pending:
            self.pending = False
            self.runs += 1
            self._dispatch_owed()

    def run_pending(self) -> None:
        """Before a reply is written: the pass, when one is pending."""
        if self.pending:
            self.run()
