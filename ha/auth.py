"""The HA link's shared-secret handshake: both peers prove they know `ha_secret` before any log byte flows.

With a secret on both sides the connection opens with (see docs/ha.md for the byte table):

    slave  -> master  OFFER     = magic "TMQA" | slave nonce (32 bytes)
    master -> slave   CHALLENGE = magic "TMQN" | master nonce (32 bytes)     (sent at accept)
    slave  -> master  PROOF     = HMAC-SHA256(secret, SLAVE_CONTEXT | master nonce | slave nonce | HELLO) | HELLO
                                  (the HELLO with the slave's broker id: the MAC covers what it claims)
    master -> slave   REPLY | HMAC-SHA256(secret, MASTER_CONTEXT | master nonce | slave nonce | HELLO | REPLY)

The master checks the slave's MAC (hmac.compare_digest) before it judges the HELLO, so a peer
without the secret learns nothing of the log, not even its offsets; the slave checks the
master's MAC before it takes any frame, so a fake master cannot feed it. Fresh nonces from
both sides make a recorded exchange useless; the two context strings stop a MAC from being
reflected back as the other side's. Every frame has a fixed size and the whole handshake a
deadline (`handshake_timeout_ms`). Without TLS the frames after the handshake are neither
encrypted nor authenticated (docs/tls.md).

Only one side has a secret: the connection is refused, never silently downgraded. A master
with a secret drops a plain HELLO; a master without one answers an OFFER with an INCOMPATIBLE
reply; either way the master counts and logs it, and the slave logs it and retries with back-off.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from collections.abc import Callable

from ha.errors import AuthRefused, ProtocolViolation
from ha.protocol import HELLO_MAGIC, REPLY_MAGIC, Hello, Reply, Verdict, read_hello, read_reply

NONCE_BYTES = 32
MAC_BYTES = hashlib.sha256().digest_size
OFFER_MAGIC = b"TMQA"
CHALLENGE_MAGIC = b"TMQN"
OFFER = struct.Struct(f">4s{NONCE_BYTES}s")
CHALLENGE = struct.Struct(f">4s{NONCE_BYTES}s")
SLAVE_CONTEXT = b"tidemq ha v1 slave proof\x00"
MASTER_CONTEXT = b"tidemq ha v1 master proof\x00"
# Shortest accepted secret: 16 characters keep a guessed secret out of reach of an online attack.
MIN_SECRET_LENGTH = 16

RecvExact = Callable[[int], bytes]
Send = Callable[[bytes], None]


def mac(secret: bytes, context: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, context + b"".join(parts), hashlib.sha256).digest()


def master_handshake(recv_exact: RecvExact, send: Send, secret: bytes | None, judge: Callable[[Hello], Reply]) -> tuple[Hello, Reply]:
    """The master's side up to and including its REPLY; AuthRefused before `judge` sees an unproven peer."""
    master_nonce = secrets.token_bytes(NONCE_BYTES) if secret is not None else b""
    if secret is not None:
        send(CHALLENGE.pack(CHALLENGE_MAGIC, master_nonce))
    head = recv_exact(4)
    if head == HELLO_MAGIC:
        if secret is not None:
            raise AuthRefused("the peer sent a HELLO without proving it knows ha_secret (it has none set?)")
        hello, _ = read_hello(recv_exact, head)
        reply = judge(hello)
        send(reply.pack())
        return hello, reply
    if head != OFFER_MAGIC:
        if secret is not None:
            raise AuthRefused(f"not a tidemq slave (magic {head!r})")
        raise ProtocolViolation(f"not a tidemq slave (magic {head!r})")
    slave_nonce = recv_exact(NONCE_BYTES)
    if secret is None:
        reason = "the slave proves an ha_secret but this master has none set"
        send(Reply(Verdict.INCOMPATIBLE, -1, -1, -1, None, reason).pack())
        raise AuthRefused(reason)
    proof = recv_exact(MAC_BYTES)
    try:
        # Read before the MAC is checked: its size is bounded (MAX_BROKER_ID_BYTES), and the MAC
        # covers every byte of it, the broker id the slave claims included.
        hello, hello_bytes = read_hello(recv_exact)
    except ProtocolViolation as exc:
        raise AuthRefused(f"an unproven peer sent a malformed HELLO: {exc}") from exc
    if not hmac.compare_digest(proof, mac(secret, SLAVE_CONTEXT, master_nonce, slave_nonce, hello_bytes)):
        raise AuthRefused("wrong HMAC: the peer does not know ha_secret")
    reply = judge(hello)
    reply_bytes = reply.pack()
    send(reply_bytes + mac(secret, MASTER_CONTEXT, master_nonce, slave_nonce, hello_bytes, reply_bytes))
    return hello, reply


def slave_handshake(recv_exact: RecvExact, send: Send, secret: bytes | None, hello: Hello) -> Reply:
    """The slave's side up to the master's REPLY; ProtocolViolation when the master's proof (or lack of one) is wrong."""
    hello_bytes = hello.pack()
    if secret is None:
        send(hello_bytes)
        head = recv_exact(4)
        if head == CHALLENGE_MAGIC:
            raise ProtocolViolation("the master requires ha_secret and this slave has none set")
        return read_reply(recv_exact, head)
    slave_nonce = secrets.token_bytes(NONCE_BYTES)
    send(OFFER.pack(OFFER_MAGIC, slave_nonce))
    head = recv_exact(4)
    if head == REPLY_MAGIC:
        reply = read_reply(recv_exact, head)
        raise ProtocolViolation(f"the master does not authenticate ({reply.verdict.name}: {reply.reason})")
    if head != CHALLENGE_MAGIC:
        raise ProtocolViolation(f"not a tidemq master (magic {head!r})")
    master_nonce = recv_exact(NONCE_BYTES)
    send(mac(secret, SLAVE_CONTEXT, master_nonce, slave_nonce, hello_bytes) + hello_bytes)
    received: list[bytes] = []

    def recording(n: int) -> bytes:
        data = recv_exact(n)
        received.append(data)
        return data

    reply = read_reply(recording)
    proof = recv_exact(MAC_BYTES)
    expected = mac(secret, MASTER_CONTEXT, master_nonce, slave_nonce, hello_bytes, b"".join(received))
    if not hmac.compare_digest(proof, expected):
        raise ProtocolViolation("the master did not prove it knows ha_secret (wrong HMAC)")
    return reply
