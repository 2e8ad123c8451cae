"""Which open event stream delivered which receipt handle, so that an ack frees room in its stream.

Used on the event loop only (the receive stream and the ack route run there), so it takes no lock.
Bounded: a stream holds at most its max_in_flight handles, and forgets them all when it closes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from store import Popped


@dataclass(slots=True)
class StreamState:
    """One open stream: its unacked messages (handle -> invisible until, ms) and a wake-up for acks."""

    max_in_flight: int
    unacked: dict[str, int] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def expire(self, now_ms: int) -> int | None:
        """Forget messages whose invisible time ended (they will be delivered again); the next such time, or None."""
        for handle in [h for h, until in self.unacked.items() if until <= now_ms]:
            del self.unacked[handle]
        return min(self.unacked.values(), default=None)


class StreamRegistry:
    def __init__(self) -> None:
        self._owner: dict[str, StreamState] = {}

    def delivered(self, state: StreamState, popped: list[Popped]) -> None:
        for p in popped:
            state.unacked[p.handle] = p.invisible_until_ms
            self._owner[p.handle] = state

    def acked(self, handles: list[str]) -> None:
        for handle in handles:
            state = self._owner.pop(handle, None)
            if state is not None and state.unacked.pop(handle, None) is not None:
                state.changed.set()

    def closed(self, state: StreamState) -> None:
        for handle in state.unacked:
            self._owner.pop(handle, None)
        state.unacked.clear()
