"""Receipt handles: what a receive gives a consumer to ack or change the invisible time of a message.

A handle names the checkpoint the message belongs to and the message's place in its queue, as
RocketMQ 5's ExtraInfo does (start offset, pop time, invisible time, revive queue, queue id,
offset, and whether the message came from the group's retry topic), and is authenticated with
an HMAC-SHA256 under a secret kept in the store (`config/popSecret`, and in the log for the
store's slaves: PopSecret) over the group, the topic and those fields: a forged or altered handle, or one used for another group or topic, fails
`ReceiptHandles.decode` and can never ack another message.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import os
from typing import Any, NamedTuple

from store.disk.json_file import write_bytes_atomically
from store.errors import StoreError
from store.state.state_table import RecordTag, StateKind, StateTable

SECRET_FILE = "popSecret"
SECRET_BYTES = 32
TAG_BYTES = 16  # HMAC-SHA256 truncated to 128 bits
FIELD_COUNT = 8


class HandleInvalid(StoreError):
    """Raised when a receipt handle is malformed, forged, altered or names another group or topic."""


class ReceiptHandle(NamedTuple):  # immutable, and made per message received or acked: a tuple, not a frozen dataclass
    start_offset: int  # the checkpoint's start offset
    pop_time: int  # when the receive took the message (ms since the epoch)
    invisible_time: int  # ms the message stays invisible from pop_time
    revive_queue_id: int  # the revive queue the checkpoint went to
    queue_id: int
    offset: int  # the message's offset in its queue
    retry: bool  # the message came from the group's retry topic, not the topic itself
    reconsume_times: int

    @property
    def invisible_until_ms(self) -> int:
        return self.pop_time + self.invisible_time

    def fields(self) -> str:
        return (
            f"{self.start_offset} {self.pop_time} {self.invisible_time} {self.revive_queue_id} {self.queue_id} {self.offset} "
            f"{int(self.retry)} {self.reconsume_times}"
        )


class PopSecret(StateTable):
    """The handle secret, shared by a master and its slaves: a state record carries it, so a handle a
    consumer got from the old master still acks on the new one after a failover.

    A store makes its own on first use (`config/popSecret`, durable before any handle is given out); a
    master writes it into the log as a snapshot (the state snapshot service does it for a table with
    none in the log), and a slave that applies it takes its master's secret, file included.
    """

    kind = StateKind.POP_SECRET

    def __init__(self, config_dir: str) -> None:
        super().__init__()
        self.path = os.path.join(config_dir, SECRET_FILE)
        self.secret = b""

    def load(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                secret = fh.read()
        except FileNotFoundError:
            secret = b""
        if len(secret) != SECRET_BYTES:  # none yet, or a torn create: no handle was made with it, so a new one is safe
            secret = _create_secret(self.path)
        self.secret = secret
        self.based = True

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        value = payload.get("secret")
        if type(value) is str and len(value) == 2 * SECRET_BYTES:
            secret = bytes.fromhex(value)
            if secret != self.secret:
                self.secret = secret
                self.dirty = True

    def rows_locked(self) -> list[Any]:
        return [self.secret.hex()] if self.secret else []

    def restore_locked(self, rows: list[Any]) -> None:
        if rows:
            self.apply_locked({"secret": rows[0]})

    def _snapshot_chunk_locked(self, tag: RecordTag, payload: dict[str, Any]) -> None:
        super()._snapshot_chunk_locked(tag, payload)
        rows = payload.get("rows")
        if type(rows) is list and rows:  # one row: the secret itself, taken whichever node applies it
            self.restore_locked(rows)

    def persist(self) -> None:
        with self._lock:
            secret, self.dirty = self.secret, False
        if secret:
            write_bytes_atomically(self.path, secret, mode=0o600)


class ReceiptHandles:
    """Makes and checks receipt handles with the store's secret."""

    def __init__(self, secret: bytes | PopSecret) -> None:
        if isinstance(secret, bytes):
            assert len(secret) == SECRET_BYTES
            table = PopSecret("")
            table.secret = secret
            secret = table
        self._table = secret
        # The secret and an HMAC keyed with it: a tag copies it (the key's two hashed blocks) instead of keying anew.
        self._keyed: tuple[bytes, Any] | None = None

    @property
    def _secret(self) -> bytes:
        return self._table.secret

    @classmethod
    def load_or_create(cls, config_dir: str) -> ReceiptHandles:
        """The store's handles; the secret is made on first use, durable before any handle is given out."""
        table = PopSecret(config_dir)
        table.load()
        return cls(table)

    def encode(self, group: str, topic: str, handle: ReceiptHandle) -> str:
        payload = handle.fields().encode("ascii")
        tag = self._tag(group, topic, payload)
        return f"{_b64(payload)}.{_b64(tag)}"

    def decode(self, group: str, topic: str, text: str) -> ReceiptHandle:
        """The handle `text` stands for; HandleInvalid unless this store made it for this group and topic."""
        if len(text) > 256:
            raise HandleInvalid("a receipt handle is at most 256 characters")
        payload_text, sep, tag_text = text.partition(".")
        if not sep:
            raise HandleInvalid("not a receipt handle")
        payload, tag = _unb64(payload_text), _unb64(tag_text)
        if _b64(payload) != payload_text or _b64(tag) != tag_text:  # one text per handle: no spare bits, no stray characters
            raise HandleInvalid("a receipt handle is base64url text")
        if not hmac.compare_digest(tag, self._tag(group, topic, payload)):
            raise HandleInvalid("the receipt handle was not issued for this group and topic by this broker")
        parts = payload.decode("ascii").split(" ")
        assert len(parts) == FIELD_COUNT, parts  # authentic, so made by encode
        so, pt, it, rq, qid, offset, retry, times = (int(p) for p in parts)
        return ReceiptHandle(so, pt, it, rq, qid, offset, retry == 1, times)

    def _tag(self, group: str, topic: str, payload: bytes) -> bytes:
        secret, keyed = self._secret, self._keyed
        if keyed is None or keyed[0] is not secret:  # the first tag, or a secret a failover's state record replaced
            keyed = self._keyed = (secret, hmac.new(secret, digestmod=hashlib.sha256))
        mac = keyed[1].copy()
        mac.update(group.encode() + b"\x00" + topic.encode() + b"\x00" + payload)
        return mac.digest()[:TAG_BYTES]


def _create_secret(path: str) -> bytes:
    secret = os.urandom(SECRET_BYTES)
    write_bytes_atomically(path, secret, mode=0o600)  # durable before any handle made with it is given out
    return secret


# base64url's two characters for the standard alphabet's and back: base64.urlsafe_b64encode and _b64decode's
# translations, applied around binascii's codec directly (each handle is encoded once and decoded and re-encoded
# at its ack: base64's Python wrappers were most of that work).
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def _b64(data: bytes) -> str:
    """base64.urlsafe_b64encode(data) without its padding, as text."""
    return binascii.b2a_base64(data, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """base64.urlsafe_b64decode of `text` padded (characters outside the alphabet are discarded, as there: `decode`
    re-encodes what this returns and refuses a text that differs)."""
    try:
        return binascii.a2b_base64((text + "=" * (-len(text) % 4)).encode("ascii").translate(_FROM_URLSAFE))
    except (binascii.Error, ValueError):  # UnicodeEncodeError (not ASCII) is a ValueError
        raise HandleInvalid("a receipt handle is base64url text") from None
