"""Server-sent events (the group stream's `text/event-stream`) split out of the body's pieces.

Invariants: only complete events (ended by a blank line) come out; comments (`: heartbeat`) are
dropped; an event's `data` lines are joined with newlines; a partial event is held until its end,
at most `MAX_EVENT_BYTES` (a longer one is a protocol error).
"""

from __future__ import annotations

from tidemq.errors import ProtocolError

# The longest event kept while it is incomplete (a received message is at most a few MiB as JSON).
MAX_EVENT_BYTES = 16 * 1024 * 1024


class EventParser:
    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, piece: bytes) -> list[tuple[str, str]]:
        """The (event, data) pairs completed by this piece."""
        self._buffer += piece.replace(b"\r\n", b"\n")
        out: list[tuple[str, str]] = []
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                break
            block, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
            name, data = "message", []
            for line in block.decode("utf-8", errors="replace").split("\n"):
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)
            if data:
                out.append((name, "\n".join(data)))
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise ProtocolError("an event stream event over the cap")
        return out
