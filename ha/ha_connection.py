"""HAConnection: the master's side of one slave connection (a reader and a writer thread).

The reader runs the handshake (TLS when configured, the `ha_secret` proof when set: ha/auth.py),
takes the slave's HELLO, has the HAService judge it, answers, and on ACCEPT
starts the writer; it then reads the slave's 8-byte reports (its acknowledged offset). The
writer sends frames of whole messages from the start offset the handshake agreed, at most
`ha_transfer_batch_size_bytes` each (one larger message goes whole), a heartbeat frame when
idle for `ha_send_heartbeat_interval_ms`.

Invariants: frames leave in log order without gaps (`sent_offset` only grows); acknowledged
offsets only grow and never pass what this connection handed the slave (`sent_offset`, the end
of the bytes given to the socket, set before the send, so a report of them is never early): a
slave claiming more is cut off, so its acks count only bytes it was sent (or, at the handshake,
the end its HELLO's check proved). The first failure of either thread closes the connection and
both threads end within `io_poll_ms`. A slave silent for `ha_housekeeping_interval_ms` is
disconnected.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING

from core import ServiceThread
from ha.auth import master_handshake
from ha.errors import AuthRefused, ConnectionLost, ProtocolViolation, TLSFailed
from ha.protocol import FRAME_HEADER, REPORT, Channel, Verdict, whole_messages_length

if TYPE_CHECKING:
    from ha.ha_service import HAService

log = logging.getLogger("tidemq.ha")


class HAConnection:
    def __init__(self, service: HAService, sock: socket.socket, peer: tuple[str, int]) -> None:
        self.service = service
        self.address = f"{peer[0]}:{peer[1]}"
        cfg = service.store.config
        self.channel = Channel(sock, service.settings.io_poll_ms, cfg.ha_housekeeping_interval_ms, self.is_closed)
        self.state = "HANDSHAKING"
        self.broker_id = ""  # the slave's broker id, from its HELLO
        self.start_offset = -1
        self.sent_offset = -1
        self.acked_offset = -1
        self.connected_at = time.time()
        self.last_report_at = time.monotonic()
        self.close_reason = ""
        self._closed = False
        self._close_lock = threading.Lock()
        self.reader = _ReadSocketService(self)
        self.writer = _WriteSocketService(self)

    def start(self) -> None:
        self.reader.start()

    def is_closed(self) -> bool:
        return self._closed

    def close(self, reason: str) -> None:
        """Close once; both threads see it within `io_poll_ms`."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.close_reason = reason
        if self.state == "STREAMING":
            self.state = "CLOSED"
        self.channel.close()
        self.writer.wakeup()
        self.service.remove(self)
        log.info("slave %s disconnected: %s", self.address, reason)

    def stop(self, reason: str) -> None:
        """Close and wait (bounded) for both threads."""
        self.close(reason)
        self.reader.shutdown()
        self.writer.shutdown()

    def status(self) -> dict[str, object]:
        master_max = self.service.store.commit_log_max_offset()
        return {
            "address": self.address,
            "broker_id": self.broker_id or None,
            "state": self.state.lower(),
            "acknowledged_offset": self.acked_offset,
            "sent_offset": self.sent_offset,
            "bytes_behind": max(0, master_max - self.acked_offset) if self.acked_offset >= 0 else None,
            "connected_at_ms": int(self.connected_at * 1000),
            "last_report_age_ms": int((time.monotonic() - self.last_report_at) * 1000),
        }


class _ReadSocketService(ServiceThread):
    """Handshake, then the slave's reports."""

    def __init__(self, conn: HAConnection) -> None:
        super().__init__(f"HAReadSocketService-{conn.address}")
        self.conn = conn

    def run(self) -> None:
        conn = self.conn
        reason = "stopping"
        try:
            if self._handshake():
                self._read_reports()
        except (AuthRefused, TLSFailed) as exc:
            reason = str(exc)
            conn.state = "REFUSED"
            conn.service.on_auth_refused(conn.address, reason)
        except (ConnectionLost, ProtocolViolation) as exc:
            reason = str(exc)
        except Exception as exc:
            log.exception("slave %s: unexpected error", conn.address)
            reason = f"unexpected {type(exc).__name__}"
        finally:
            conn.close(reason)

    def _handshake(self) -> bool:
        conn = self.conn
        service = conn.service
        channel = conn.channel
        channel.deadline = time.monotonic() + service.settings.handshake_timeout_ms / 1000.0
        if service.tls_context is not None:
            channel.start_tls(service.tls_context, server_side=True)
        hello, reply = master_handshake(
            channel.recv_exact, channel.send, service.settings.secret_bytes(), lambda h: service.judge(h, conn.address)
        )
        channel.deadline = None
        if reply.verdict is not Verdict.ACCEPT:
            conn.state = "REFUSED"
            conn.close(f"refused ({reply.verdict.name}): {reply.reason}")
            return False
        conn.start_offset = conn.sent_offset = reply.start_offset
        conn.acked_offset = hello.max_offset
        conn.broker_id = hello.broker_id
        conn.state = "STREAMING"
        conn.service.on_accepted(conn)
        conn.writer.start()
        log.info("slave %s streaming from offset %d (its log ends at %d)", conn.address, reply.start_offset, hello.max_offset)
        return True

    def _read_reports(self) -> None:
        conn = self.conn
        buf = bytearray(REPORT.size)
        view = memoryview(buf)
        store = conn.service.store
        while not self.is_stopped() and not conn.is_closed():
            conn.channel.recv_into(view)
            (offset,) = REPORT.unpack(buf)
            conn.last_report_at = time.monotonic()
            if offset < conn.acked_offset or offset > conn.sent_offset:
                raise ProtocolViolation(
                    f"slave reported offset {offset} (previous {conn.acked_offset}, sent to it up to {conn.sent_offset}, "
                    f"master end {store.commit_log_max_offset()})"
                )
            if offset != conn.acked_offset:
                conn.acked_offset = offset
                conn.service.on_ack(conn, offset)


class _WriteSocketService(ServiceThread):
    """Commitlog frames, and heartbeats when idle (the topic table and every other state travel in the log)."""

    def __init__(self, conn: HAConnection) -> None:
        super().__init__(f"HAWriteSocketService-{conn.address}")
        self.conn = conn

    def run(self) -> None:
        conn = self.conn
        try:
            self._loop()
        except ConnectionLost as exc:
            conn.close(str(exc))
        except Exception as exc:
            log.exception("slave %s: unexpected error while sending", conn.address)
            conn.close(f"unexpected {type(exc).__name__}")

    def _loop(self) -> None:
        conn = self.conn
        service = conn.service
        store = service.store
        cfg = store.config
        heartbeat_s = cfg.ha_send_heartbeat_interval_ms / 1000.0
        poll_ms = service.settings.write_poll_ms
        last_send = time.monotonic()
        while not self.is_stopped() and not conn.is_closed():
            if self._send_available(cfg.ha_transfer_batch_size_bytes):
                last_send = time.monotonic()
                continue
            if time.monotonic() - last_send >= heartbeat_s:
                conn.channel.send(FRAME_HEADER.pack(store.commit_log_max_offset(), 0))
                last_send = time.monotonic()
            self.wait_for_running(poll_ms)

    def _send_available(self, batch_bytes: int) -> bool:
        """Send every whole message readable past `sent_offset`; True when anything was sent."""
        conn = self.conn
        store = conn.service.store
        sent_any = False
        while not conn.is_closed() and conn.sent_offset < store.commit_log_max_offset():
            offset = conn.sent_offset
            res = store.commit_log_view(offset)
            if res is None:
                min_offset = store.commit_log_min_offset()
                if offset < min_offset:
                    raise ConnectionLost(f"the slave needs offset {offset}, below the master's first offset {min_offset} (files deleted)")
                return sent_any  # the next file is being created; try again after the poll
            try:
                length = whole_messages_length(res.view, res.size, batch_bytes)
                if length == 0:
                    log.error("commitlog bytes at %d are not a message; not sending them to %s", offset, conn.address)
                    raise ConnectionLost(f"corrupt commitlog at {offset}")
                body = res.view[:length]
                try:
                    # Before the send: the slave may report these bytes as soon as they arrive.
                    conn.sent_offset = offset + length
                    conn.channel.send(FRAME_HEADER.pack(offset, length), body)
                finally:
                    body.release()
            finally:
                res.release()
            sent_any = True
        return sent_any
