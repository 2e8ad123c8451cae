"""A forged slave against a master's HA port: what it claims is checked against the master's log before
its acknowledgements count, and they never pass what the master sent it; with ha_secret it is dropped.

The attacker speaks the protocol over a raw socket: a HELLO claiming the master's end with a check of
nothing, then reports of the master's end as fast as puts arrive. A SYNC_MASTER must answer none of
its puts as replicated."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha import HANode, HASettings, attach
from ha.protocol import REPORT, VERSION, Hello, Verdict, read_reply
from store import DefaultMessageStore, PutMessageStatus, build_message
from tests.ha.test_auth import SECRET
from tests.ha.test_handshake import FILE_SIZE, connect, recv_exact, store_config
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)
PUTS = 5


def start_sync_master(
    root: Path, secret: str | None, file_size: int = FILE_SIZE, housekeeping_ms: int = 2_000
) -> tuple[DefaultMessageStore, HANode]:
    settings = HASettings(role="master", ha_port=0, replication="sync", ha_secret=secret)
    config = settings.apply_to(store_config(root))
    config.mapped_file_size_commit_log_bytes = file_size
    config.ha_housekeeping_interval_ms = housekeeping_ms
    config.sync_flush_timeout_ms = 1_000
    store = DefaultMessageStore(config)
    store.load()
    node = attach(store, settings)
    assert node is not None
    store.topic_config_manager.create_or_update("T", 1)  # before the start: no slave to confirm its record
    store.start()
    return store, node


@pytest.fixture(params=[None, SECRET], ids=["no-secret", "secret"])
def sync_master(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[DefaultMessageStore, HANode]]:
    store, node = start_sync_master(tmp_path / "m", request.param)
    try:
        yield store, node
    finally:
        store.shutdown()


def keep_acking(sock: socket.socket, store: DefaultMessageStore, stop: threading.Event) -> None:
    """The attacker's acknowledgements: the master's end, over and over, as if it held everything."""
    try:
        while not stop.is_set():
            sock.sendall(REPORT.pack(store.commit_log_max_offset()))
            time.sleep(0.005)  # the attacker's own pace
    except OSError:
        pass  # cut off by the master


def test_a_forged_hello_claiming_the_masters_end_wins_no_put(sync_master: tuple[DefaultMessageStore, HANode]) -> None:
    store, node = sync_master
    for i in range(10):
        store.put_message(build_message("T", f"before-{i}".encode(), 0))  # SLAVE_NOT_AVAILABLE, but stored
    end = store.commit_log_max_offset()
    forged = Hello(VERSION, FILE_SIZE, end, end, 0, 0)  # "my log ends where yours does", proving nothing
    sock = connect(node)
    stop = threading.Event()
    acker = threading.Thread(target=keep_acking, args=(sock, store, stop))
    with sock:
        sock.sendall(forged.pack())
        if node.settings.ha_secret is None:
            reply = read_reply(lambda n: recv_exact(sock, n))
            assert reply.verdict is Verdict.INCOMPATIBLE and "must cover" in reply.reason, reply
        acker.start()
        try:
            statuses = [store.put_message(build_message("T", f"after-{i}".encode(), 0)).status for i in range(PUTS)]
        finally:
            stop.set()
            acker.join(5)
    assert PutMessageStatus.PUT_OK not in statuses, statuses
    assert node.status()["acknowledged_offset"] == -1 and node.status()["connection_state"] == "no_slave"


def test_acknowledgements_never_pass_what_was_sent_on_the_connection(tmp_path: Path) -> None:
    """An empty 'slave' is accepted and streamed to, but it does not read: its report of the master's end
    is more than the master handed its socket, and it is cut off without counting (the housekeeping
    interval, which would also cut a peer that takes nothing, is far longer than the wait here)."""
    store, node = start_sync_master(tmp_path / "m", None, file_size=4 * 1024 * 1024, housekeeping_ms=60_000)
    try:
        body = b"x" * 60_000
        for _ in range(170):  # ~10 MiB: more than the kernel's socket buffers hold (tcp_wmem's max is 4 MiB)
            store.put_message(build_message("T", body, 0))
        end = store.commit_log_max_offset()
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the master's sends stall soon
            assert node.service is not None
            host, port = node.service.listen_address.split(":")
            sock.settimeout(10)
            sock.connect((host, int(port)))
            sock.sendall(Hello(VERSION, 4 * 1024 * 1024, 0, 0, 0, 0).pack())
            assert read_reply(lambda n: recv_exact(sock, n)).verdict is Verdict.ACCEPT
            sent = stalled_sent_offset(node)
            assert 0 <= sent < end, (sent, end)
            sock.sendall(REPORT.pack(end))
            acked: list[int] = []
            wait_for(
                lambda: (
                    acked.append(node.status()["acknowledged_offset"])  # type: ignore[func-returns-value]  # append, then check
                    or node.status()["connection_state"] == "no_slave"
                ),
                5.0,
                what=lambda: f"the master to drop the forger: {node.status()['slaves']}",
            )
        assert end not in acked and node.status()["acknowledged_offset"] == -1
        assert store.put_message(build_message("T", b"after", 0)).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    finally:
        store.shutdown()


def stalled_sent_offset(node: HANode) -> int:
    """The connection's sent offset once the master's writer stopped moving (the peer does not read)."""
    seen = {"sent": -2, "since": time.monotonic()}

    def stalled() -> tuple[int] | None:
        rows = node.status()["slaves"]
        sent = rows[0]["sent_offset"] if rows else -2
        if sent != seen["sent"]:
            seen.update(sent=sent, since=time.monotonic())
            return None
        return (sent,) if time.monotonic() - seen["since"] > 0.5 else None

    stalled_at = wait_for(stalled, 20, what=lambda: f"the writer to stop sending: {seen['sent']}", poll_s=0.05)
    assert stalled_at is not None  # wait_for answers a truthy value
    (sent,) = stalled_at
    return sent
