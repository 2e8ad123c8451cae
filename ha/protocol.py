"""The HA wire protocol between a master and its slaves (big-endian throughout).

With `ha_secret` set, ha/auth.py's OFFER/CHALLENGE/PROOF exchange comes first and a MAC follows the
REPLY (docs/ha.md has the byte table); with TLS, everything below runs inside the TLS session.

Slave -> master, once:   HELLO  = magic "TMQS" | version u16 | commitlog file size i64 |
                                  slave max offset i64 | check start i64 | check length i32 |
                                  check CRC32 u32 | broker id length u16 | broker id (UTF-8)
                                  (version 1 ended after the CRC: it had no broker id)
Master -> slave, once:   REPLY  = magic "TMQM" | verdict u8 | master min offset i64 |
                                  master max offset i64 | start offset i64 | info length u16 |
                                  info (UTF-8 JSON: http_address, reason, epoch)
Master -> slave, then:   FRAME  = physical offset i64 | length i32 | body
                                  length > 0: commitlog bytes at that offset (whole messages)
                                  length = 0: heartbeat; the offset is the master's max offset
                                  length < 0: control frame of -length bytes (UTF-8 JSON)
Slave -> master, then:   REPORT = the slave's max offset i64 (after each write and every heartbeat)

Invariants: a data frame's body is whole messages (and end-of-file markers), so a slave
never holds half a message except after a crash, which recovery truncates. Only the
handshake and control frames carry JSON; the data path is fixed-size headers and raw bytes.
"""

from __future__ import annotations

import enum
import json
import socket
import ssl
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ha.errors import ConnectionLost, ProtocolViolation, TLSFailed
from store.layouts import BLANK_MAGIC_CODE, FIXED_PART_BYTES, MESSAGE_MAGIC_CODE, V6_EXTRA_BYTES

# 2: the HELLO names the slave's broker id (a cluster's master counts acknowledgements per broker).
VERSION = 2
HELLO = struct.Struct(">4sHqqqiI")  # the fixed part; from version 2 the broker id follows
BROKER_ID_LENGTH = struct.Struct(">H")
# Longest broker id a HELLO carries (an advertised HTTP URL); a master reads no more than this.
MAX_BROKER_ID_BYTES = 1_024
HELLO_MAGIC = b"TMQS"
REPLY = struct.Struct(">4sBqqqH")
REPLY_MAGIC = b"TMQM"
FRAME_HEADER = struct.Struct(">qi")
REPORT = struct.Struct(">q")
_TOTAL_AND_MAGIC = struct.Struct(">iI")
# Bytes a frame may carry beyond the batch bound: one message of the largest kind plus its fixed part.
# (Topic length 1 byte, properties length 2 bytes, an end-of-file marker 8.)
MESSAGE_OVERHEAD_BYTES = FIXED_PART_BYTES + 2 * V6_EXTRA_BYTES + 255 + 32_767 + 8  # two IPv6 hosts at most


class Verdict(enum.Enum):
    """The master's answer to a HELLO."""

    ACCEPT = 0
    DIVERGED = 1
    INCOMPATIBLE = 2


@dataclass(slots=True)
class Hello:
    version: int
    file_size: int
    max_offset: int
    check_start: int
    check_length: int
    check_crc: int
    broker_id: str = ""  # the slave's broker id (its advertised HTTP address; "" when it has none)

    def pack(self) -> bytes:
        fixed = HELLO.pack(HELLO_MAGIC, self.version, self.file_size, self.max_offset, self.check_start, self.check_length, self.check_crc)
        if self.version < 2:
            return fixed
        broker_id = self.broker_id.encode()
        assert len(broker_id) <= MAX_BROKER_ID_BYTES, "HASettings.validate() bounds the advertised HTTP address"
        return fixed + BROKER_ID_LENGTH.pack(len(broker_id)) + broker_id


def read_hello(recv_exact: Callable[[int], bytes], head: bytes = b"") -> tuple[Hello, bytes]:
    """Read a HELLO (`head`: its first bytes, already read); the Hello and its bytes as sent (a MAC covers them).

    A version other than this one's is read up to the fixed part only: its verdict is INCOMPATIBLE anyway."""
    fixed = head + recv_exact(HELLO.size - len(head))
    magic, version, file_size, max_offset, check_start, check_length, check_crc = HELLO.unpack(fixed)
    if magic != HELLO_MAGIC:
        raise ProtocolViolation(f"not a tidemq slave (magic {magic!r})")
    hello = Hello(version, file_size, max_offset, check_start, check_length, check_crc)
    if version != VERSION:
        return hello, fixed
    length_bytes = recv_exact(BROKER_ID_LENGTH.size)
    (length,) = BROKER_ID_LENGTH.unpack(length_bytes)
    if length > MAX_BROKER_ID_BYTES:
        raise ProtocolViolation(f"a broker id of {length} bytes, more than {MAX_BROKER_ID_BYTES}")
    raw_id = recv_exact(length)
    try:
        hello.broker_id = raw_id.decode()
    except UnicodeDecodeError as exc:
        raise ProtocolViolation(f"the broker id is not UTF-8: {exc}") from exc
    return hello, fixed + length_bytes + raw_id


@dataclass(slots=True)
class Reply:
    verdict: Verdict
    master_min_offset: int
    master_max_offset: int
    start_offset: int
    http_address: str | None
    reason: str
    epoch: int = 0  # the master's election epoch (a cluster's, docs/cluster.md); 0 outside a cluster

    def pack(self) -> bytes:
        info = json.dumps({"http_address": self.http_address, "reason": self.reason, "epoch": self.epoch}).encode()[:65535]
        return (
            REPLY.pack(REPLY_MAGIC, self.verdict.value, self.master_min_offset, self.master_max_offset, self.start_offset, len(info)) + info
        )


def read_reply(recv_exact: Callable[[int], bytes], head: bytes = b"") -> Reply:
    """Read a REPLY; `head` is its first bytes when the caller already read them (to tell frames apart)."""
    magic, verdict, min_offset, max_offset, start, info_len = REPLY.unpack(head + recv_exact(REPLY.size - len(head)))
    if magic != REPLY_MAGIC:
        raise ProtocolViolation(f"not a tidemq master (magic {magic!r})")
    try:
        info = json.loads(recv_exact(info_len)) if info_len else {}
        kind = Verdict(verdict)
    except ValueError as exc:
        raise ProtocolViolation(f"bad handshake reply: {exc}") from exc
    epoch = info.get("epoch", 0)
    if not isinstance(epoch, int) or epoch < 0:
        raise ProtocolViolation(f"bad handshake reply: epoch {epoch!r}")
    return Reply(kind, min_offset, max_offset, start, info.get("http_address"), str(info.get("reason", "")), epoch)


def control_frame(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return FRAME_HEADER.pack(0, -len(body)) + body


def log_crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


# The shortest end-of-file marker: its total size and magic code (RocketMQ's END_FILE_MIN_BLANK_LENGTH).
END_MARKER_BYTES = 8


def whole_messages_length(view: memoryview, size: int, batch_bytes: int) -> int:
    """Length of the longest prefix of `view[:size]` made of whole messages and at most `batch_bytes`.

    A first message larger than the batch is returned whole. 0 means the bytes at the
    start are not a message (a corrupt log): the caller must not send them.
    """
    pos = 0
    unpack = _TOTAL_AND_MAGIC.unpack_from
    while pos + 8 <= size:
        total, magic = unpack(view, pos)
        # A file's end marker is its total and magic alone when a file ends with 8 bytes free (RocketMQ's
        # END_FILE_MIN_BLANK_LENGTH); a message is always longer.
        shortest = END_MARKER_BYTES if magic == BLANK_MAGIC_CODE else END_MARKER_BYTES + 1
        if total < shortest or pos + total > size or magic not in (MESSAGE_MAGIC_CODE, BLANK_MAGIC_CODE):
            break
        if pos > 0 and pos + total > batch_bytes:
            break
        pos += total
        if pos >= batch_bytes:
            break
    return pos


class Channel:
    """A blocking socket with a poll timeout, read and written in whole units.

    Every wait is bounded: a call returns, raises ConnectionLost when `should_stop()` turns
    true or the peer stays silent (reads) or stuck (writes) for `silence_ms`, or `deadline`
    (a monotonic time, set for the handshake) passes: a peer dripping bytes cannot hold it.
    """

    def __init__(self, sock: socket.socket, poll_ms: int, silence_ms: int, should_stop: Callable[[], bool]) -> None:
        self.sock = sock
        self.silence_ms = silence_ms
        self.should_stop = should_stop
        self.last_read = time.monotonic()
        self.on_idle: Callable[[], None] | None = None  # called on every read timeout (the slave's heartbeat)
        self.deadline: float | None = None
        # An SSLSocket has no sendmsg: parts go one send() at a time (the retry after a timeout
        # repeats the same part, as OpenSSL requires).
        self._tls = isinstance(sock, ssl.SSLSocket)
        sock.settimeout(poll_ms / 1000.0)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def start_tls(self, context: ssl.SSLContext, server_side: bool, server_hostname: str | None = None) -> None:
        """Run the TLS handshake over this connection (bounded by `deadline` and the stop flag); TLSFailed when it fails."""
        tls = context.wrap_socket(self.sock, server_side=server_side, server_hostname=server_hostname, do_handshake_on_connect=False)
        self.sock = tls
        self._tls = True
        while True:
            try:
                tls.do_handshake()
                return
            except TimeoutError:
                self._check_silence()
            except ssl.SSLError as exc:
                raise TLSFailed(f"TLS handshake failed: {exc.reason or exc}") from exc
            except OSError as exc:
                raise ConnectionLost(f"TLS handshake failed: {exc}") from exc

    def recv_into(self, buf: memoryview) -> None:
        """Fill `buf` completely."""
        got = 0
        need = len(buf)
        while got < need:
            try:
                n = self.sock.recv_into(buf[got:])
            except TimeoutError:
                self._check_silence()
                if self.on_idle is not None:
                    self.on_idle()
                continue
            except OSError as exc:
                raise ConnectionLost(f"receive failed: {exc}") from exc
            if n == 0:
                raise ConnectionLost("the peer closed the connection")
            got += n
            self.last_read = time.monotonic()
            self._check_deadline()

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        self.recv_into(memoryview(buf))
        return bytes(buf)

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ConnectionLost("the handshake did not complete in time")

    def _check_silence(self) -> None:
        if self.should_stop():
            raise ConnectionLost("stopping")
        self._check_deadline()
        silent_ms = (time.monotonic() - self.last_read) * 1000
        if silent_ms > self.silence_ms:
            raise ConnectionLost(f"the peer was silent for {silent_ms:.0f} ms (limit {self.silence_ms} ms)")

    def send(self, *parts: bytes | memoryview) -> None:
        """Send every part (one sendmsg call when the kernel takes it all)."""
        pending = [memoryview(p).cast("B") for p in parts if len(p)]
        stuck_since = time.monotonic()
        while pending:
            try:
                sent = self.sock.send(pending[0]) if self._tls else self.sock.sendmsg(pending)
            except TimeoutError:
                if self.should_stop():
                    raise ConnectionLost("stopping") from None
                self._check_deadline()
                if (time.monotonic() - stuck_since) * 1000 > self.silence_ms:
                    raise ConnectionLost(f"the peer took nothing for {self.silence_ms} ms") from None
                continue
            except OSError as exc:
                raise ConnectionLost(f"send failed: {exc}") from exc
            stuck_since = time.monotonic()
            while sent and pending:
                head = pending[0]
                if sent >= len(head):
                    sent -= len(head)
                    pending.pop(0)
                else:
                    pending[0] = head[sent:]
                    sent = 0

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
