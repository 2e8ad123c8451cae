"""ReplyTransport joins the writes of one loop turn into one write, in order, and loses none at close."""

from __future__ import annotations

import asyncio
import socket

from app.reply_transport import ReplyTransport


class Recording(asyncio.Protocol):
    pass


async def _pair() -> tuple[asyncio.Transport, socket.socket, list[bytes]]:
    """A real socket transport whose write calls are recorded, and the peer socket."""
    left, right = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(Recording, left)
    calls: list[bytes] = []
    real_write = transport.write

    def write(data: bytes) -> None:
        calls.append(bytes(data))
        real_write(data)

    transport.write = write  # type: ignore[method-assign]
    return transport, right, calls


def _read(peer: socket.socket, n: int) -> bytes:
    peer.settimeout(2)
    out = b""
    while len(out) < n:
        out += peer.recv(n - len(out))
    return out


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
        await asyncio.sleep(0.01)
        data = _read(peer, 10)
        peer.settimeout(2)
        assert peer.recv(10) == b""  # then the end of the stream
        peer.close()
        return data

    assert asyncio.run(run()) == b"last words"


def test_a_large_reply_is_written_part_by_part_in_order() -> None:
    async def run() -> tuple[list[bytes], bytes]:
        transport, peer, calls = await _pair()
        reply = ReplyTransport(transport, asyncio.get_running_loop())
        head, body = b"H" * 100, bytes(range(256)) * 400
        reply.write(head)
        reply.write(body)
        await asyncio.sleep(0)
        got = b""
        while len(got) < len(head) + len(body):
            await asyncio.sleep(0.001)
            peer.setblocking(False)
            try:
                got += peer.recv(1 << 20)
            except BlockingIOError:
                pass
        reply.close()
        peer.close()
        return calls, got

    calls, got = asyncio.run(run())
    assert [len(c) for c in calls] == [100, 102_400]  # the head first, then the body, neither copied into the other
    assert got == b"H" * 100 + bytes(range(256)) * 400
