"""The ha_secret handshake from outside: raw sockets against a real master's HA port, and a fake master against the slave's side."""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import ConfigInvalid
from ha import HANode, HASettings, attach
from ha.auth import CHALLENGE, CHALLENGE_MAGIC, MASTER_CONTEXT, NONCE_BYTES, OFFER, OFFER_MAGIC, SLAVE_CONTEXT, slave_handshake
from ha.errors import ProtocolViolation
from ha.protocol import FRAME_HEADER, VERSION, Hello, Reply, Verdict, read_hello, read_reply
from store import DefaultMessageStore, build_message
from tests.ha.test_handshake import FILE_SIZE, connect, hello_for, recv_exact, store_config
from tests.loopback import read_until_closed
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)
SECRET = "correct horse battery staple"


def start_master(root: Path, secret: str | None, **extra: Any) -> tuple[DefaultMessageStore, HANode]:
    settings = HASettings(role="master", ha_port=0, ha_secret=secret, **extra)
    store = DefaultMessageStore(settings.apply_to(store_config(root)))
    store.load()
    node = attach(store, settings)
    assert node is not None
    store.start()
    store.topic_config_manager.create_or_update("T", 1)
    for i in range(20):
        assert store.put_message(build_message("T", f"secret-body-{i}".encode() * 10, 0)).ok
    return store, node


@pytest.fixture
def master(tmp_path: Path) -> Iterator[tuple[DefaultMessageStore, HANode]]:
    store, node = start_master(tmp_path / "m", SECRET)
    try:
        yield store, node
    finally:
        store.shutdown()


@pytest.fixture
def open_master(tmp_path: Path) -> Iterator[tuple[DefaultMessageStore, HANode]]:
    store, node = start_master(tmp_path / "m", None)
    try:
        yield store, node
    finally:
        store.shutdown()


def refused_total(node: HANode) -> int:
    """The master's count of refused peers (its HA service exists once it serves)."""
    assert node.service is not None
    return node.service.auth_refused_total


def assert_dropped_after_challenge(node: HANode, sock: socket.socket, refused_before: int, words: str) -> None:
    """The peer got the master's challenge and nothing else: no REPLY, no offsets, no log byte; it was counted."""
    received = read_until_closed(sock)
    assert len(received) == CHALLENGE.size and received.startswith(CHALLENGE_MAGIC), received[:80]
    assert b"secret-body" not in received
    assert node.service is not None
    wait_for(lambda: refused_total(node) == refused_before + 1, 5.0, "the refusal to be counted")
    assert words in node.status()["last_auth_refusal"]["reason"]
    assert node.status()["refused_total"] == 0, "an unproven peer is never judged"
    metric_rows = {name: value for name, _, _, value in node.metrics()}
    assert metric_rows["tidemq_ha_auth_refused_total"] == refused_before + 1


def test_a_peer_without_the_secret_is_dropped_before_any_log_byte_and_counted(
    master: tuple[DefaultMessageStore, HANode],
) -> None:
    store, node = master
    sock = connect(node)
    with sock:
        sock.sendall(hello_for(store, 0).pack())  # a slave with no secret speaks first
        assert_dropped_after_challenge(node, sock, 0, "without proving")


def test_a_peer_with_a_wrong_hmac_is_dropped_before_any_log_byte_and_counted(master: tuple[DefaultMessageStore, HANode]) -> None:
    store, node = master
    sock = connect(node)
    with sock:
        challenge = recv_exact(sock, CHALLENGE.size)
        _, master_nonce = CHALLENGE.unpack(challenge)
        slave_nonce = b"\x01" * NONCE_BYTES
        hello = hello_for(store, 0).pack()
        forged = hmac.new(b"not the secret at all", SLAVE_CONTEXT + master_nonce + slave_nonce + hello, hashlib.sha256).digest()
        sock.sendall(OFFER.pack(OFFER_MAGIC, slave_nonce) + forged + hello)
        rest = read_until_closed(sock)
        assert rest == b"", "nothing after the challenge: no reply, no frames"
    wait_for(lambda: refused_total(node) == 1, 5.0, "the refusal to be counted")
    assert "wrong HMAC" in node.status()["last_auth_refusal"]["reason"]


def test_the_proof_covers_the_broker_id_a_slave_claims(master: tuple[DefaultMessageStore, HANode]) -> None:
    """A MAC made for one broker id does not carry another: a peer cannot acknowledge in another broker's name."""
    store, node = master
    sock = connect(node)
    with sock:
        _, master_nonce = CHALLENGE.unpack(recv_exact(sock, CHALLENGE.size))
        slave_nonce = b"\x02" * NONCE_BYTES
        proven = Hello(VERSION, FILE_SIZE, 0, 0, 0, 0, "http://127.0.0.1:8001").pack()
        proof = hmac.new(SECRET.encode(), SLAVE_CONTEXT + master_nonce + slave_nonce + proven, hashlib.sha256).digest()
        claimed = Hello(VERSION, FILE_SIZE, 0, 0, 0, 0, "http://127.0.0.1:8002").pack()
        sock.sendall(OFFER.pack(OFFER_MAGIC, slave_nonce) + proof + claimed)
        assert read_until_closed(sock) == b"", "nothing after the challenge: no reply, no frames"
    wait_for(lambda: refused_total(node) == 1, 5.0, "the refusal to be counted")
    assert "wrong HMAC" in node.status()["last_auth_refusal"]["reason"]
    assert node.service is not None and node.service.member_acks() == {}
    assert all(row["broker_id"] is None for row in node.status()["slaves"]), "the claim was never taken"


def test_garbage_after_the_challenge_is_dropped_and_counted(master: tuple[DefaultMessageStore, HANode]) -> None:
    _, node = master
    sock = connect(node)
    with sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert_dropped_after_challenge(node, sock, 0, "not a tidemq slave")


def test_a_silent_peer_is_dropped_at_the_handshake_deadline(tmp_path: Path) -> None:
    store, node = start_master(tmp_path / "m", SECRET, handshake_timeout_ms=300)
    try:
        sock = connect(node)
        with sock:
            started = time.monotonic()
            assert len(read_until_closed(sock)) == CHALLENGE.size
            assert time.monotonic() - started < 3.0, "dropped at the handshake deadline, not the housekeeping interval"
    finally:
        store.shutdown()


def test_a_slave_with_the_secret_is_accepted_verifies_the_master_and_gets_frames(
    master: tuple[DefaultMessageStore, HANode],
) -> None:
    store, node = master
    sock = connect(node)
    with sock:
        reply = slave_handshake(lambda n: recv_exact(sock, n), sock.sendall, SECRET.encode(), hello_for(store, 0))
        assert reply.verdict is Verdict.ACCEPT and reply.master_max_offset == store.commit_log.get_max_offset()
        offset, length = FRAME_HEADER.unpack(recv_exact(sock, FRAME_HEADER.size))
        while length < 0:
            recv_exact(sock, -length)
            offset, length = FRAME_HEADER.unpack(recv_exact(sock, FRAME_HEADER.size))
        assert offset == 0 and length > 0 and b"secret-body" in recv_exact(sock, length)
    assert node.service is not None and node.service.auth_refused_total == 0


def test_a_slave_without_a_secret_is_told_the_master_requires_one(master: tuple[DefaultMessageStore, HANode]) -> None:
    store, node = master
    sock = connect(node)
    with sock, pytest.raises(ProtocolViolation, match="requires ha_secret"):
        slave_handshake(lambda n: recv_exact(sock, n), sock.sendall, None, hello_for(store, 0))
    wait_for(lambda: refused_total(node) == 1, 5.0, "the refusal to be counted")


def test_a_slave_with_a_secret_is_refused_by_a_master_without_one_and_counted(
    open_master: tuple[DefaultMessageStore, HANode],
) -> None:
    store, node = open_master
    sock = connect(node)
    with sock, pytest.raises(ProtocolViolation, match="does not authenticate"):
        slave_handshake(lambda n: recv_exact(sock, n), sock.sendall, SECRET.encode(), hello_for(store, 0))
    wait_for(lambda: refused_total(node) == 1, 5.0, "the refusal to be counted")
    assert "this master has none" in node.status()["last_auth_refusal"]["reason"]


def test_without_secrets_on_either_side_the_handshake_is_unchanged(open_master: tuple[DefaultMessageStore, HANode]) -> None:
    store, node = open_master
    sock = connect(node)
    with sock:
        sock.sendall(hello_for(store, 0).pack())
        reply = read_reply(lambda n: recv_exact(sock, n))
        assert reply.verdict is Verdict.ACCEPT
    assert node.service is not None and node.service.auth_refused_total == 0


def fake_master(proof_secret: bytes) -> tuple[socket.socket, threading.Thread]:
    """A master that knows the protocol but proves `proof_secret`; returns the slave's end."""
    slave_end, master_end = socket.socketpair()
    slave_end.settimeout(5)

    def serve() -> None:
        with master_end:
            master_nonce = b"\x07" * NONCE_BYTES
            master_end.sendall(CHALLENGE.pack(CHALLENGE_MAGIC, master_nonce))
            _, slave_nonce = OFFER.unpack(recv_exact(master_end, OFFER.size))
            recv_exact(master_end, 32)
            _, hello = read_hello(lambda n: recv_exact(master_end, n))
            reply = Reply(Verdict.ACCEPT, 0, 0, 0, None, "").pack()
            proof = hmac.new(proof_secret, MASTER_CONTEXT + master_nonce + slave_nonce + hello + reply, hashlib.sha256).digest()
            master_end.sendall(reply + proof)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return slave_end, thread


def test_a_fake_master_without_the_secret_is_not_believed() -> None:
    hello = Hello(VERSION, FILE_SIZE, 0, 0, 0, 0, "http://127.0.0.1:1")
    sock, thread = fake_master(b"a guess at the secret")
    with sock, pytest.raises(ProtocolViolation, match="did not prove"):
        slave_handshake(lambda n: recv_exact(sock, n), sock.sendall, SECRET.encode(), hello)
    thread.join(5)
    sock, thread = fake_master(SECRET.encode())
    with sock:
        assert slave_handshake(lambda n: recv_exact(sock, n), sock.sendall, SECRET.encode(), hello).verdict is Verdict.ACCEPT
    thread.join(5)


def test_a_short_secret_is_refused_at_start() -> None:
    with pytest.raises(ConfigInvalid, match="at least 16"):
        HASettings(role="master", ha_secret="short").validate()
