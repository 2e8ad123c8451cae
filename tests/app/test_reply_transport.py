"""ReplyTransport joins the writes of one loop turn into one write, in order, loses none at close, and runs
a pending dispatch pass before any of them leaves."""

from __future__ import annotations

import asyncio
import socket

from app.dispatch_barrier import DispatchBarrier
from app.reply_transport import JOIN_MAX_BYTES, ReplyTransport
from tests.waiting import wait_for_async


class Recording(asyncio.Protocol):
    pass


async def _pair() -> tuple[asyncio.Transport, socket.socket, list[bytes]]:
    """A real socket transport whose write calls are recorded, and the peer socket."""
    left, right = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(Recording, left)
    calls: list[bytes] = []
    real_write = transport.write

    def write(data: bytes | bytearray | memoryview) -> None:
        calls.append(bytes(data))
        real_write(data)

    transport.write = write  # type: ignore[method-assign]  # the test replaces the transport's write to record it
    return transport, right, calls


def _read(peer: socket.socket, n: int) -> bytes:
    peer.settimeout(2)
    out = b""
    while len(out) < n:
        out += peer.recv(n - len(out))
    return out


def _take_available(peer: socket.socket, into: bytearray) -> bool:
    """Append what the peer socket holds now to `into`, without blocking the loop; whether the stream ended."""
    peer.setblocking(False)
    while True:
        try:
            chunk = peer.recv(1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        into += chunk


def test_writes_of_one_turn_leave_in_one_write() -> None:
    async def run() -> tuple[list[bytes], bytes]:
        transport, peer, calls = await _pair()
        reply = ReplyTransport(transport, asyncio.get_running_loop())
        reply.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        reply.write(b"ok")
        assert calls == [] and reply.get_write_buffer_size() == 40
        await asyncio.sleep(0)
        got = _read(peer, 40)
        reply.write(b"next")
        await asyncio.sleep(0)
        got += _read(peer, 4)
        reply.close()
        peer.close()
        return calls, got

    calls, got = asyncio.run(run())
    assert calls == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", b"next"]
    assert got == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\noknext"


def test_close_delivers_what_was_written_before_it() -> None:
    async def run() -> bytes:
        transport, peer, _ = await _pair()
        reply = ReplyTransport(transport, asyncio.get_running_loop())
        reply.write(b"last words")
        reply.close()
        data = bytearray()
        # The loop writes and closes meanwhile: the bytes, then the end of the stream.
        await wait_for_async(lambda: _take_available(peer, data), 5, what=lambda: f"the end of the stream after {bytes(data)!r}")
        peer.close()
        return bytes(data)

    assert asyncio.run(run()) == b"last words"


def test_a_large_reply_is_written_part_by_part_in_order() -> None:
    async def run() -> tuple[list[bytes], bytes]:
        transport, peer, calls = await _pair()
        reply = ReplyTransport(transport, asyncio.get_running_loop())
        head, body = b"H" * 100, bytes(range(256)) * 400
        reply.write(head)
        reply.write(body)
        await asyncio.sleep(0)
        got = bytearray()
        await wait_for_async(
            lambda: _take_available(peer, got) or len(got) >= len(head) + len(body),
            5,
            what=lambda: f"the whole reply: {len(got)} bytes came",
            poll_s=0.001,
        )
        reply.close()
        peer.close()
        return calls, bytes(got)

    calls, got = asyncio.run(run())
    assert [len(c) for c in calls] == [100, 102_400]  # the head first, then the body, neither copied into the other
    assert got == b"H" * 100 + bytes(range(256)) * 400


def test_a_write_runs_a_pending_dispatch_pass_before_its_bytes_leave() -> None:
    """What a produce's reply waits for (app/dispatch_barrier.py): the pass pending when the turn's
    writes are flushed, or when a large body is written at once, runs before the transport sees them."""

    async def run() -> tuple[list[tuple[str, int]], list[bytes]]:
        transport, peer, calls = await _pair()
        events: list[tuple[str, int]] = []

        def dispatch_owed() -> int:
            events.append(("pass", len(calls)))  # how many writes had left when the pass ran
            return 0

        barrier = DispatchBarrier(dispatch_owed)
        reply = ReplyTransport(transport, asyncio.get_running_loop(), barrier)
        barrier.pending = True  # owed by a put of this turn whose scheduled pass has not run yet
        reply.write(b"reply one")
        reply.flush()
        barrier.pending = True
        reply.write(b"x" * (JOIN_MAX_BYTES + 1))  # written at once, not held: the pass still runs first
        reply.write(b"reply three")  # no pass pending: nothing runs
        reply.flush()
        _read(peer, 9 + JOIN_MAX_BYTES + 1 + 11)
        reply.close()
        peer.close()
        return events, calls

    events, calls = asyncio.run(run())
    assert events == [("pass", 0), ("pass", 1)]
    assert [len(c) for c in calls] == [9, JOIN_MAX_BYTES + 1, 11]
