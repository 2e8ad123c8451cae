"""HAService: the master's acceptor, its slave connections and the handshake's verdict.

The acceptor thread takes connections on the HA port (at most `max_slave_connections`);
each gets an HAConnection. `judge()` decides where a slave resumes, or that it must not:
- a different protocol version or commitlog file size: INCOMPATIBLE;
- a slave log that ends beyond the master's: DIVERGED (the master lost bytes the slave has,
  e.g. it recovered from a crash to a shorter log); never truncated from here;
- a slave log whose last `handshake_check_bytes` differ from the master's at the same offsets
  (CRC32), or that ends inside one of the master's messages: DIVERGED;
- a non-empty slave log ending below the master's first offset (files deleted): INCOMPATIBLE;
- a non-empty slave log whose check does not cover its last bytes (it must end at the slave's
  end and span `handshake_check_bytes`, or the whole last file when that is shorter) or covers
  bytes the master no longer holds: INCOMPATIBLE. A zero-length check proves nothing, and a
  slave's claimed end becomes its first acknowledged offset, which SYNC_MASTER puts count;
- an empty slave log: ACCEPT from the master's first offset;
- otherwise ACCEPT from the slave's end.

The connection list is copy-on-write: readers (status, SYNC waits, writers' wake-ups) take
it without a lock; the acceptor's add and each connection's remove replace it under
`_connections_lock`, a leaf lock, so neither update can overwrite the other.

Each connection names its slave's broker id (the HELLO's, proven with the secret when one is set);
a broker's acknowledgements count from its latest connection only (`member_acks()`), so a
connection it left behind cannot speak for it.

Invariant: the best acknowledged offset (`acked_offset()`) only grows while the service runs;
SYNC_MASTER waits are answered from it.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import threading
import time
from typing import Any

from core import ServiceThread
from ha.errors import HAStartFailed
from ha.group_transfer_service import GroupTransferService
from ha.ha_connection import HAConnection
from ha.protocol import VERSION, Hello, Reply, Verdict, log_crc
from ha.settings import HASettings
from store import MessageStore
from store.layouts import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE

log = logging.getLogger("tidemq.ha")
_MAGIC_AT = struct.Struct(">iI")


def listen_for_slaves(settings: HASettings) -> socket.socket:
    """A socket listening on `ha_host:ha_port` (port 0: one the kernel picks), backlog `max_slave_connections`;
    HAStartFailed when the port is in use or `ha_host` is exposed without ha_secret. Connections wait in the backlog
    until an HAService accepts them."""
    refusal = settings.exposure_problem()
    if refusal is not None:
        raise HAStartFailed(refusal)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.ha_host, settings.ha_port))
        sock.listen(settings.max_slave_connections)
    except OSError as exc:
        sock.close()
        raise HAStartFailed(f"cannot listen on {settings.ha_host}:{settings.ha_port}: {exc.strerror}") from exc
    return sock


class HAService(ServiceThread):
    def __init__(self, store: MessageStore, settings: HASettings, transfer: GroupTransferService | None = None) -> None:
        super().__init__("HAAcceptService")
        self.store = store
        self.settings = settings
        self.transfer = transfer
        self.connections: list[HAConnection] = []  # replaced under _connections_lock, never mutated in place
        # broker id -> its latest accepted connection (replaced whole under _connections_lock).
        self.latest: dict[str, HAConnection] = {}
        self._connections_lock = threading.Lock()  # leaf: serialises the replacements of `connections`
        self.listen_address = ""
        self.accepted_total = 0
        self.refused_total = 0
        self.last_refusal: dict[str, Any] | None = None
        # Peers dropped before proving themselves (no or wrong ha_secret proof, failed TLS handshake).
        self.auth_refused_total = 0
        self.last_auth_refusal: dict[str, Any] | None = None
        self.tls_context: ssl.SSLContext | None = settings.tls.server_context() if settings.tls is not None else None
        self._last_accept_time = 0.0
        self._server: socket.socket | None = None

    # Lifecycle -------------------------------------------------------------------------

    def bind(self, listener: socket.socket | None = None) -> None:
        """Listen on the HA port now, so a port in use (or a non-loopback address without ha_secret) fails
        the start-up, not a thread later; `listener`: one `listen_for_slaves` opened before (a cluster broker's,
        held from its start), which this service owns from here on."""
        server = listener if listener is not None else listen_for_slaves(self.settings)
        server.settimeout(self.settings.io_poll_ms / 1000.0)
        host, port = server.getsockname()[:2]
        self.listen_address = f"{host}:{port}"
        self._server = server
        log.info("HA service listening on %s", self.listen_address)

    def run(self) -> None:
        server = self._server
        assert server is not None, "bind() before start()"
        try:
            while not self.is_stopped():
                try:
                    sock, peer = server.accept()
                except TimeoutError:
                    continue
                except OSError as exc:
                    if not self.is_stopped():
                        log.warning("accept failed: %s", exc)
                        self.wait_for_running(self.settings.io_poll_ms)
                    continue
                conn = HAConnection(self, sock, peer)
                if not self._add(conn):
                    log.warning("refusing slave %s:%d: already %d connections", peer[0], peer[1], len(self.connections))
                    sock.close()
                    continue
                conn.start()
        finally:
            server.close()

    def shutdown(self) -> None:
        super().shutdown()
        for conn in list(self.connections):
            conn.stop("master stopping")

    # Called by connections -------------------------------------------------------------

    def _add(self, conn: HAConnection) -> bool:
        """Track a new connection; False at `max_slave_connections`."""
        with self._connections_lock:
            if len(self.connections) >= self.settings.max_slave_connections:
                return False
            self.connections = [*self.connections, conn]
        return True

    def remove(self, conn: HAConnection) -> None:
        with self._connections_lock:
            self.connections = [c for c in self.connections if c is not conn]
            if self.latest.get(conn.broker_id) is conn:
                self.latest = {k: c for k, c in self.latest.items() if c is not conn}

    def on_accepted(self, conn: HAConnection) -> None:
        self.accepted_total += 1
        self._last_accept_time = time.time()
        with self._connections_lock:
            self.latest = {**self.latest, conn.broker_id: conn}
        if self.transfer is not None:
            self.transfer.connected(conn.broker_id, conn.acked_offset)
        self.on_ack(conn, conn.acked_offset)

    def on_auth_refused(self, address: str, reason: str) -> None:
        self.auth_refused_total += 1
        self.last_auth_refusal = {"address": address, "reason": reason, "at_ms": int(time.time() * 1000)}
        log.warning("HA peer %s dropped before authenticating: %s", address, reason)

    def on_ack(self, conn: HAConnection, offset: int) -> None:
        if self.transfer is not None and (self.transfer.required is None or self.latest.get(conn.broker_id) is conn):
            self.transfer.notify_acked(offset, conn.broker_id)

    def wakeup_writers(self) -> None:
        for conn in self.connections:
            conn.writer.wakeup()

    # The handshake ---------------------------------------------------------------------

    def judge(self, hello: Hello, address: str) -> Reply:
        """The verdict on a slave's HELLO (see the module docstring)."""
        verdict, start, reason = self._verdict(hello)
        first, end = self.store.commit_log_min_offset(), self.store.commit_log_max_offset()
        reply = Reply(verdict, first, end, start, self.settings.advertised_http_address, reason, self.settings.epoch)
        if verdict is not Verdict.ACCEPT:
            self.refused_total += 1
            self.last_refusal = {"address": address, "verdict": verdict.name, "reason": reason, "at_ms": int(time.time() * 1000)}
            log.error("slave %s refused (%s): %s", address, verdict.name, reason)
        return reply

    def _verdict(self, hello: Hello) -> tuple[Verdict, int, str]:
        master_min = self.store.commit_log_min_offset()
        master_max = self.store.commit_log_max_offset()
        file_size = self.store.config.mapped_file_size_commit_log_bytes
        slave_max = hello.max_offset
        if hello.version != VERSION:
            return Verdict.INCOMPATIBLE, -1, f"protocol version {hello.version}, the master speaks {VERSION}"
        if hello.file_size != file_size:
            return Verdict.INCOMPATIBLE, -1, f"commitlog file size {hello.file_size} bytes, the master's is {file_size}"
        if slave_max > master_max:
            return Verdict.DIVERGED, -1, f"the slave's log ends at {slave_max}, beyond the master's end {master_max}"
        if slave_max == 0:
            return Verdict.ACCEPT, master_min, "empty slave: starting at the master's first offset"
        if slave_max < master_min:
            return Verdict.INCOMPATIBLE, -1, f"the slave's log ends at {slave_max}; the master's now begins at {master_min} (files deleted)"
        if slave_max < master_max:
            head = self.store.get_commit_log_data(slave_max, 8)
            if len(head) < 8 or _MAGIC_AT.unpack(head)[1] not in (MESSAGE_MAGIC_CODE, BLANK_MAGIC_CODE):
                return Verdict.DIVERGED, -1, f"the slave's log ends at {slave_max}, inside one of the master's messages"
        problem = self._check_problem(hello, master_min, file_size)
        if problem is not None:
            return Verdict.INCOMPATIBLE, -1, problem
        ours = self.store.get_commit_log_data(hello.check_start, hello.check_length)
        if len(ours) != hello.check_length or log_crc(ours) != hello.check_crc:
            return Verdict.DIVERGED, -1, f"the slave's bytes [{hello.check_start}, {slave_max}) differ from the master's"
        return Verdict.ACCEPT, slave_max, ""

    def _check_problem(self, hello: Hello, master_min: int, file_size: int) -> str | None:
        """Why a non-empty slave's check cannot vouch for its claimed end (None: it can, once its CRC matches)."""
        slave_max = hello.max_offset
        last_file_start = (slave_max - 1) - ((slave_max - 1) % file_size)
        needed = min(self.settings.handshake_check_bytes, slave_max - last_file_start)
        covered = hello.check_start + hello.check_length == slave_max and hello.check_start >= last_file_start
        if hello.check_length < needed or not covered:
            end = hello.check_start + hello.check_length
            return (
                f"the slave's check covers [{hello.check_start}, {end}); it must cover its last {needed} bytes "
                f"(handshake_check_bytes, within its last file), up to {slave_max}"
            )
        if hello.check_start < master_min:
            return f"the slave's check begins at {hello.check_start}, below the master's first offset {master_min} (files deleted)"
        return None

    # Status ----------------------------------------------------------------------------

    def streaming(self) -> list[HAConnection]:
        return [c for c in self.connections if c.state == "STREAMING"]

    def member_acks(self) -> dict[str, int]:
        """broker id -> the offset its latest connection acknowledged, for the slaves streaming now."""
        return {broker_id: c.acked_offset for broker_id, c in self.latest.items() if c.state == "STREAMING" and broker_id}

    def acked_offset(self) -> int:
        """The best offset a connected slave acknowledged (-1 with none)."""
        acks = [c.acked_offset for c in self.streaming()]
        return max(acks) if acks else -1

    def slave_ok(self, end_offset: int) -> bool:
        """A slave streams and is at most `ha_slave_fall_behind_max_bytes` behind `end_offset`."""
        best = self.acked_offset()
        return best >= 0 and end_offset - best <= self.store.config.ha_slave_fall_behind_max_bytes

    def status(self) -> dict[str, Any]:
        streaming = self.streaming()
        best = self.acked_offset()
        master_max = self.store.commit_log_max_offset()
        refusal = self.last_refusal
        diverged = bool(refusal and refusal["verdict"] == Verdict.DIVERGED.name and refusal["at_ms"] > self._last_accept_time * 1000)
        return {
            "role": "master",
            "replication": self.settings.replication,
            "epoch": self.settings.epoch,
            "ha_address": self.listen_address,
            "peer_address": streaming[0].address if streaming else None,
            "connection_state": "connected" if streaming else "no_slave",
            "acknowledged_offset": best,
            "bytes_behind": master_max - best if best >= 0 else None,
            "diverged": diverged,
            "diverged_reason": f"slave {refusal['address']}: {refusal['reason']}" if diverged and refusal else None,
            "master_http_address": self.settings.advertised_http_address,
            "slaves": [c.status() for c in self.connections],
            "accepted_total": self.accepted_total,
            "refused_total": self.refused_total,
            "last_refusal": refusal,
            "tls": self.tls_context is not None,
            "authenticated": self.settings.ha_secret is not None,
            "auth_refused_total": self.auth_refused_total,
            "last_auth_refusal": self.last_auth_refusal,
        }
