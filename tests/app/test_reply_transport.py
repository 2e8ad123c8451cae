"""ReplyTransport joins the writes of one loop turn into one write, in order, loses none at close, and runs
a pending dispatch pass before any of them leaves."""

from __future__ import annotations

import asyncio
import socket

from app.dispatch_barrier import DispatchBarrier
from app.reply_transport import JOIN_MAX_BYTES, YIELD_TURNS, ReplyTransport
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


async def _with_recorded_pass() -> tuple[ReplyTransport, DispatchBarrier, socket.socket, list[bytes], list[str]]:
    """A ReplyTransport over a recorded pair (`_pair`) whose barrier's passes are recorded in `events` with the
    writes made before each."""
    transport, peer, calls = await _pair()
    events: list[str] = []

    def dispatch_owed() -> int:
        events.append(f"pass after {len(calls)} writes")
        return 0

    barrier = DispatchBarrier(dispatch_owed)
    return ReplyTransport(transport, asyncio.get_running_loop(), barrier), barrier, peer, calls, events


def test_a_reply_written_now_leaves_at_once_after_what_is_held_and_the_pending_pass() -> None:
    """A reply that waited (a held pull's, a held durable produce's) is written within the call, after what the
    connection holds and after a pending dispatch pass, and nothing is left for the turn's end."""

    async def run() -> tuple[list[str], list[bytes], bytes]:
        reply, barrier, peer, calls, events = await _with_recorded_pass()
        reply.write(b"held ")
        barrier.pending = True
        reply.write_now(b"now")
        events.append(f"returned after {len(calls)} writes")
        assert reply.get_write_buffer_size() == 0
        await asyncio.sleep(0)  # the turn's scheduled flush finds nothing
        got = _read(peer, 8)
        reply.close()
        peer.close()
        return events, calls, got

    events, calls, got = asyncio.run(run())
    assert events == ["pass after 0 writes", "returned after 1 writes"]
    assert calls == [b"held now"] and got == b"held now"


def test_an_early_reply_leaves_before_the_pending_pass_unless_something_is_held() -> None:
    """A held pull's reply of the message its put delivered (`early`) is written before the pending pass, which stays
    pending for its scheduled run; with writes held on the connection it is written after them and the pass, as any."""

    async def run() -> tuple[list[str], list[bytes]]:
        reply, barrier, peer, calls, events = await _with_recorded_pass()
        barrier.pending = True
        reply.write_now(b"early", early=True)
        events.append(f"returned after {len(calls)} writes, pass pending {barrier.pending}")
        barrier.run()
        reply.write(b"held ")
        barrier.pending = True
        reply.write_now(b"later", early=True)
        events.append(f"returned after {len(calls)} writes, pass pending {barrier.pending}")
        got = _read(peer, 15)
        assert got == b"earlyheld later"
        reply.close()
        peer.close()
        return events, calls

    events, calls = asyncio.run(run())
    assert events == [
        "returned after 1 writes, pass pending True",
        "pass after 1 writes",
        "pass after 1 writes",
        "returned after 2 writes, pass pending False",
    ]
    assert calls == [b"early", b"held later"]


async def _pair_into(calls: list[tuple[str, bytes]], name: str) -> tuple[asyncio.Transport, socket.socket]:
    """A real socket transport whose write calls are recorded in a list shared with others, and the peer socket."""
    left, right = socket.socketpair()
    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(Recording, left)
    real_write = transport.write

    def write(data: bytes | bytearray | memoryview) -> None:
        calls.append((name, bytes(data)))
        real_write(data)

    transport.write = write  # type: ignore[method-assign]  # the test replaces the transport's write to record it
    return transport, right


def test_a_produce_reply_yields_to_the_replies_of_the_held_requests_its_pass_woke() -> None:
    """The turn's pass wakes a held pull, whose continuation runs in the next turn and writes its reply (as
    app.routes_pull's does): the produce's reply, written yielding in the pass's turn, leaves after it, and
    a reply written plainly in that turn does not wait."""

    async def run() -> tuple[list[tuple[str, bytes]], list[int]]:
        loop = asyncio.get_running_loop()
        calls: list[tuple[str, bytes]] = []
        (p_transport, p_peer), (c_transport, c_peer), (o_transport, o_peer) = [
            await _pair_into(calls, name) for name in ("producer", "consumer", "other")
        ]
        woken = [0]
        barrier = DispatchBarrier(lambda: 0, lambda: woken[0])
        producer = ReplyTransport(p_transport, loop, barrier)
        consumer = ReplyTransport(c_transport, loop, barrier)
        other = ReplyTransport(o_transport, loop, barrier)

        def pass_that_wakes() -> int:
            woken[0] += 1
            loop.call_soon(lambda: consumer.write(b"found"))  # the woken pull's continuation, next turn
            return 1

        barrier._dispatch_owed = pass_that_wakes
        barrier.owe()  # a put of this turn
        producer.write_yielding(b"201")
        other.write(b"200")
        turns_to_201 = 0
        while not any(name == "producer" for name, _ in calls):
            await asyncio.sleep(0)
            turns_to_201 += 1
        assert not barrier.woke  # the turn that woke is over
        # A pass that wakes nobody: the next produce reply leaves in its own turn.
        barrier._dispatch_owed = lambda: 1
        barrier.owe()
        producer.write_yielding(b"201 again")
        before = len(calls)
        await asyncio.sleep(0)
        assert calls[before:] == [("producer", b"201 again")]
        for transport, peer in ((producer, p_peer), (consumer, c_peer), (other, o_peer)):
            transport.close()
            peer.close()
        return calls, [turns_to_201]

    calls, (turns,) = asyncio.run(run())
    assert [name for name, _ in calls[:3]] == ["other", "consumer", "producer"]
    assert turns == 1 + YIELD_TURNS  # its own turn, then the turns it yields


def test_a_yielding_reply_is_written_at_once_by_a_close_or_a_large_write_and_in_order() -> None:
    async def run() -> tuple[list[tuple[str, bytes]], bytes]:
        loop = asyncio.get_running_loop()
        calls: list[tuple[str, bytes]] = []
        transport, peer = await _pair_into(calls, "producer")
        woken = [0]

        def pass_that_wakes() -> int:
            woken[0] += 1
            return 1

        barrier = DispatchBarrier(pass_that_wakes, lambda: woken[0])
        reply = ReplyTransport(transport, loop, barrier)
        barrier.owe()
        reply.write_yielding(b"201 first")
        await asyncio.sleep(0)  # the pass woke: the reply yields
        assert calls == [] and barrier.woke
        reply.write(b"B" * (JOIN_MAX_BYTES + 1))  # what is held goes first, then the large write, now
        assert [len(data) for _, data in calls] == [9, JOIN_MAX_BYTES + 1]
        barrier.owe()
        reply.write_yielding(b"201 last")
        await asyncio.sleep(0)
        reply.close()  # held, yielding: written before the close
        got = bytearray()
        await wait_for_async(lambda: _take_available(peer, got), 5, what=lambda: f"the end of the stream after {len(got)} bytes")
        peer.close()
        return calls, bytes(got)

    calls, got = asyncio.run(run())
    assert got == b"201 first" + b"B" * (JOIN_MAX_BYTES + 1) + b"201 last"
    assert [data for _, data in calls][-1] == b"201 last"
