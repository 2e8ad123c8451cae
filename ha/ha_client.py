"""HAClient: the slave's one replication thread.

It connects to the master (back-off from `reconnect_backoff_min_ms`, doubling up to
`reconnect_backoff_max_ms`), sends its HELLO (its log's end and a CRC32 of its last
`handshake_check_bytes`), then appends every data frame at the same physical offset in its
own commitlog, wakes its ReputMessageService (which builds queues and index from the bytes)
and reports its new end. It reports at least every `ha_send_heartbeat_interval_ms` and drops
a master silent for `ha_housekeeping_interval_ms`.

States: CONNECTING -> STREAMING -> DISCONNECTED (then CONNECTING again); DIVERGED and
REFUSED are final until restart: the slave keeps serving reads but never writes again, and
the reason is in its log and status. Invariants: bytes are appended only at the log's end
and only whole frames (a frame cut mid-way is dropped with the connection); nothing here
ever truncates or overwrites the slave's log.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any

from core import ServiceThread
from ha.auth import slave_handshake
from ha.errors import ConnectionLost, HandshakeRefused, ProtocolViolation
from ha.protocol import FRAME_HEADER, MESSAGE_OVERHEAD_BYTES, REPORT, VERSION, Channel, Hello, Reply, Verdict, log_crc
from ha.settings import HASettings, parse_address
from store import MessageStore

log = logging.getLogger("tidemq.ha")

FINAL_STATES = frozenset({"DIVERGED", "REFUSED"})
# Pause of the thread once replication stopped for good (it only waits for shutdown then).
HALTED_WAIT_MS = 1_000


class HAClient(ServiceThread):
    def __init__(self, store: MessageStore, settings: HASettings) -> None:
        super().__init__("HAClient")
        assert settings.master_ha_address, "a slave needs the master's HA address"
        self.store = store
        self.settings = settings
        self.master_address = parse_address(settings.master_ha_address)
        cfg = store.config
        self.heartbeat_s = cfg.ha_send_heartbeat_interval_ms / 1000.0
        self.max_frame_bytes = max(cfg.ha_transfer_batch_size_bytes, cfg.max_message_size_bytes + MESSAGE_OVERHEAD_BYTES)
        self.state = "DISCONNECTED"
        self.reason: str | None = None
        self.last_error: str | None = None
        self.master_http_address = settings.master_http_address
        self.master_max_offset = -1
        self.master_epoch = 0  # the epoch the master named in the last accepted handshake
        self.reported_offset = -1
        self.connects_total = 0
        self.sessions_total = 0
        self.frames_total = 0
        self.bytes_total = 0
        self._channel: Channel | None = None
        self._last_report = 0.0
        self._buffer = bytearray(self.max_frame_bytes)
        # Built once: a TLS context loads and parses the certificate files.
        self._tls_context = settings.tls.client_context() if settings.tls is not None else None

    # The loop --------------------------------------------------------------------------

    def run(self) -> None:
        backoff_ms = self.settings.reconnect_backoff_min_ms
        while not self.is_stopped():
            if self.state in FINAL_STATES:
                self.wait_for_running(HALTED_WAIT_MS)
                continue
            streamed = False
            try:
                streamed = self._session()
            except HandshakeRefused as exc:
                self.state = "DIVERGED" if exc.verdict == Verdict.DIVERGED.name else "REFUSED"
                self.reason = exc.reason
                log.error(
                    "replication stopped (%s): %s; this slave serves reads but will not copy the master again", self.state, exc.reason
                )
                continue
            except (ConnectionLost, ProtocolViolation, OSError) as exc:
                self.last_error = str(exc) or type(exc).__name__
                if not self.is_stopped():
                    log.warning("connection to master %s lost: %s", self.settings.master_ha_address, self.last_error)
            finally:
                self._close()
            if self.is_stopped():
                break
            if self.state not in FINAL_STATES:
                self.state = "DISCONNECTED"
            if streamed:
                backoff_ms = self.settings.reconnect_backoff_min_ms
            self.wait_for_running(backoff_ms)
            backoff_ms = min(backoff_ms * 2, self.settings.reconnect_backoff_max_ms)
        self.state = "STOPPED" if self.state not in FINAL_STATES else self.state

    def _close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def _session(self) -> bool:
        """One connection: handshake, then frames until it fails. True once it streamed."""
        self.state = "CONNECTING"
        self.connects_total += 1
        sock = socket.create_connection(self.master_address, timeout=self.settings.connect_timeout_ms / 1000.0)
        cfg = self.store.config
        channel = Channel(sock, self.settings.io_poll_ms, cfg.ha_housekeeping_interval_ms, self.is_stopped)
        self._channel = channel
        reply = self._handshake(channel)
        if reply.verdict is not Verdict.ACCEPT:
            raise HandshakeRefused(reply.verdict.name, reply.reason)
        if reply.epoch < self.settings.epoch:
            # A deposed master still answering: its log may hold a tail the group's master never had.
            raise HandshakeRefused(Verdict.INCOMPATIBLE.name, f"the master's epoch {reply.epoch} is older than {self.settings.epoch}")
        self.master_epoch = reply.epoch
        if self.settings.master_http_address is None:
            self.master_http_address = reply.http_address
        self.master_max_offset = reply.master_max_offset
        own_end = self.store.commit_log_max_offset()
        if reply.start_offset != own_end:
            raise HandshakeRefused(
                Verdict.INCOMPATIBLE.name,
                f"the master starts this slave at {reply.start_offset} but its log ends at {own_end}; "
                "an empty slave can only copy a master whose log still begins at 0",
            )
        self.state = "STREAMING"
        self.sessions_total += 1
        self.last_error = None
        log.info("replicating from %s at offset %d (master end %d)", self.settings.master_ha_address, own_end, reply.master_max_offset)
        self._report(channel)
        channel.on_idle = self._heartbeat
        self._stream(channel)
        return True

    def _handshake(self, channel: Channel) -> Reply:
        """TLS (when configured), the secret proof (when set) and HELLO/REPLY, within `handshake_timeout_ms`."""
        channel.deadline = time.monotonic() + self.settings.handshake_timeout_ms / 1000.0
        if self._tls_context is not None:
            channel.start_tls(self._tls_context, server_side=False, server_hostname=self.master_address[0])
        secret = self.settings.secret_bytes()
        try:
            reply = slave_handshake(channel.recv_exact, channel.send, secret, self._hello())
        except ConnectionLost as exc:
            if secret is not None:
                # A master that does not accept our proof closes the connection without a word.
                raise ConnectionLost(f"{exc} during the handshake (does the master have the same ha_secret?)") from exc
            raise
        channel.deadline = None
        return reply

    def _hello(self) -> Hello:
        end = self.store.commit_log_max_offset()
        file_size = self.store.config.mapped_file_size_commit_log_bytes
        broker_id = self.settings.advertised_http_address or ""  # a cluster's master counts acknowledgements by it
        if end == 0:
            return Hello(VERSION, file_size, 0, 0, 0, 0, broker_id)
        last_file_start = (end - 1) - ((end - 1) % file_size)
        start = max(end - self.settings.handshake_check_bytes, last_file_start)
        data = self.store.get_commit_log_data(start, end - start)
        return Hello(VERSION, file_size, end, start, len(data), log_crc(data), broker_id)

    # Streaming -------------------------------------------------------------------------

    def _stream(self, channel: Channel) -> None:
        header = bytearray(FRAME_HEADER.size)
        header_view = memoryview(header)
        buffer = memoryview(self._buffer)
        store = self.store
        while not self.is_stopped():
            channel.recv_into(header_view)
            offset, length = FRAME_HEADER.unpack(header)
            if length > 0:
                if length > self.max_frame_bytes:
                    raise ProtocolViolation(f"frame of {length} bytes, more than the {self.max_frame_bytes} this slave accepts")
                end = store.commit_log_max_offset()
                if offset != end:
                    raise ProtocolViolation(f"frame at offset {offset} but this slave's log ends at {end}")
                body = buffer[:length]
                channel.recv_into(body)
                if not store.append_replicated_data(offset, body):
                    raise ProtocolViolation(f"could not append {length} bytes at {offset}")
                self.frames_total += 1
                self.bytes_total += length
                self.master_max_offset = max(self.master_max_offset, offset + length)
                self._report(channel)
            elif length == 0:
                self.master_max_offset = offset
                self._heartbeat()
            else:
                self._control(channel, -length)

    def _control(self, channel: Channel, length: int) -> None:
        if length > self.settings.max_control_frame_bytes:
            raise ProtocolViolation(f"control frame of {length} bytes, more than {self.settings.max_control_frame_bytes}")
        try:
            payload = json.loads(channel.recv_exact(length))
        except ValueError as exc:
            raise ProtocolViolation(f"control frame is not JSON: {exc}") from exc
        # An older master sends its topic table this way; the table now arrives as state records in the log.
        kind = payload.get("kind") if isinstance(payload, dict) else None
        log.debug("ignoring a control frame (%s) from the master", kind)

    def _report(self, channel: Channel) -> None:
        offset = self.store.commit_log_max_offset()
        channel.send(REPORT.pack(offset))
        self.reported_offset = offset
        self._last_report = time.monotonic()

    def _heartbeat(self) -> None:
        channel = self._channel
        if channel is not None and time.monotonic() - self._last_report >= self.heartbeat_s:
            self._report(channel)

    # Status ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        super().shutdown()
        self._close()

    def status(self) -> dict[str, Any]:
        own_end = self.store.commit_log_max_offset()
        return {
            "role": "slave",
            "peer_address": self.settings.master_ha_address,
            "epoch": self.master_epoch,
            "connection_state": self.state.lower(),
            "acknowledged_offset": self.reported_offset,
            "master_max_offset": self.master_max_offset,
            "bytes_behind": max(0, self.master_max_offset - own_end) if self.master_max_offset >= 0 else None,
            "diverged": self.state == "DIVERGED",
            "diverged_reason": self.reason if self.state == "DIVERGED" else None,
            "refused_reason": self.reason if self.state == "REFUSED" else None,
            "master_http_address": self.master_http_address,
            "last_error": self.last_error,
            "connects_total": self.connects_total,
            "sessions_total": self.sessions_total,
            "frames_total": self.frames_total,
            "bytes_total": self.bytes_total,
        }
