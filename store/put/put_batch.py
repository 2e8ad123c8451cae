"""PutBatch: what the store's one `put` takes (MessageStore.put, docs/store-api.md).

A batch is one of three forms, each appended under one acquisition of the put lock:
- MESSAGES: MessageInner objects (any topics and queues; a single message is a batch of one);
- FIELDS: the fields of parsed messages (body, tags, keys, properties, msg_id) to one topic and
  queue; the store builds their properties and packs them into RocketMQ's batch encoding itself
  (`pack`), so a JSON produce pays no per-message MessageInner;
- ENCODED: a RocketMQ batch (MessageDecoder.encodeMessages) the store's check_batch accepted, to
  one topic and queue, appended as it came.

Hooks (store/put/put_hook.py) may turn an ENCODED batch into MESSAGES (a timer or half batch, whose
messages each get their own properties) and rewrite messages; the commitlog only appends.

Besides the messages a batch carries what the hooks act on: `deliver_at_ms` (every message a timer
message due then), `producer_group` (half messages of that group), and, for the store's own
puts, `on_appended_locked` (run under the put lock with the appended items) and `state_records`
(the last so many messages are the broker's state, not counted as messages stored).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from store import _kernels
from store.codec.message import (
    DEFAULT_BORN_HOST,
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    UNIQ_KEY_CHUNK,
    MessageInner,
    decode_properties,
    new_uniq_key,
    new_uniq_keys,
    reserve_uniq_key,
    reserve_uniq_keys,
    uniq_keys_of,
)
from store.native import BATCH_ITEM_HEAD, CheckedBatch, json_produce, pack_batch, pack_one
from store.status import AppendedHook

# The property a producer's dedup id travels in (docs/http-api.md, "Idempotent produce"); the store also
# adds the id to the message's KEYS, so the index finds it after a restart or on a promoted slave.
DEDUP_PROPERTY = "TIDEMQ_DEDUP_ID"
UNIQ_KEY_NAME = PROPERTY_UNIQ_KEY.encode("ascii")
_new_tuple = tuple.__new__
# The most property bytes `packed_raw` takes besides its UNIQ_KEY (name, \x01, 32 characters, \x02): a batch item's
# property length is 2 bytes.
MAX_RAW_PROPERTIES_BYTES = 0xFFFF - len(UNIQ_KEY_NAME) - 1 - 32 - 1
raw_item = _kernels.raw_item  # raw_item(body, properties, head, first): `raw_item_of` in C


class BatchForm(enum.Enum):
    MESSAGES = "MESSAGES"
    FIELDS = "FIELDS"
    ENCODED = "ENCODED"


class MessageFields(Protocol):
    """One parsed message of a FIELDS batch (the front end's draft has these attributes)."""

    @property
    def body(self) -> bytes: ...
    @property
    def tags(self) -> str | None: ...
    @property
    def keys(self) -> list[str] | None: ...
    @property
    def properties(self) -> dict[str, str] | None: ...
    @property
    def msg_id(self) -> str | None: ...
    @property
    def dedup_id(self) -> str | None: ...


@dataclass(slots=True, eq=False)
class PutBatch:
    form: BatchForm
    messages: Sequence[MessageInner] = ()  # MESSAGES
    fields: Sequence[MessageFields] = ()  # FIELDS
    encoded: CheckedBatch | None = None  # ENCODED (and FIELDS once packed)
    topic: str = ""  # FIELDS and ENCODED: every message's topic and queue
    queue_id: int = 0
    born_host: bytes = DEFAULT_BORN_HOST  # FIELDS and ENCODED: every message's BORNHOST (8 or 20 bytes)
    deliver_at_ms: int | None = None  # ENCODED: every message is due then (ms since the epoch)
    producer_group: str | None = None  # store the messages as half messages of this producer group
    dedup: bool = False  # a producer's put: its messages' dedup ids are honoured (store/put/dedup_hook.py)
    on_appended_locked: AppendedHook | None = None  # the store's own puts: run under the put lock after the append
    state_records: int = 0  # the last so many messages are state records (store/state/state_log.py)
    # The caller runs DefaultMessageStore.dispatch_owed before it answers the put (the front end's produces,
    # so the puts of one event-loop turn are dispatched in one pass); False: dispatched before `put` returns.
    defer_dispatch: bool = False
    # The store's own records that no request reads back (POP checkpoints and acks, state records): the put
    # owes their dispatch to the next pass (a later put's or `dispatch_owed`, else the dispatch thread's
    # within its IDLE_WAIT_MS) instead of dispatching before `put` returns.
    lazy_dispatch: bool = False
    # The caller waits for durability itself (DefaultMessageStore.durable_through of the put's end, one wait
    # for the puts of an event-loop turn): the put's future is done at once and its result says
    # `durability_owed` when there is a flush or slave wait to make.
    defer_durability: bool = False
    # FIELDS: each message's UNIQ_KEY (its msg_id, or one the store made), known once packed.
    uniq_keys: list[str] = field(default_factory=list)
    # FIELDS packed by the caller (`of_packed`: `packed_json` or `packed_raw`): the store checks it
    # as it checks the packing of `fields`; its keys stay in it (`uniq_keys` is not filled).
    packed: PackedProduce | None = None
    # Run, in order, when the put stores nothing (a hook or the commitlog refused it).
    on_refused: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    def of(
        cls, messages: Sequence[MessageInner], producer_group: str | None = None, on_appended_locked: AppendedHook | None = None,
        state_records: int = 0, dedup: bool = False, lazy_dispatch: bool = False,
    ) -> PutBatch:  # fmt: skip
        """A MESSAGES batch (a single message is a batch of one)."""
        return cls(
            BatchForm.MESSAGES, messages=messages, producer_group=producer_group, on_appended_locked=on_appended_locked,
            state_records=state_records, dedup=dedup, lazy_dispatch=lazy_dispatch,
        )  # fmt: skip

    @classmethod
    def of_fields(
        cls, topic: str, queue_id: int, fields: Sequence[MessageFields], born_host: bytes = DEFAULT_BORN_HOST, dedup: bool = False
    ) -> PutBatch:
        """A FIELDS batch: parsed messages to one queue, packed by the store."""
        return cls(BatchForm.FIELDS, fields=fields, topic=topic, queue_id=queue_id, born_host=born_host, dedup=dedup)

    @classmethod
    def of_packed(
        cls, topic: str, queue_id: int, packed: PackedProduce, born_host: bytes = DEFAULT_BORN_HOST, dedup: bool = False
    ) -> PutBatch:
        """A FIELDS batch already packed (`packed_json`, `packed_raw`) to one queue."""
        return cls(BatchForm.FIELDS, topic=topic, queue_id=queue_id, born_host=born_host, dedup=dedup, packed=packed)

    @classmethod
    def of_encoded(
        cls, topic: str, queue_id: int, encoded: CheckedBatch, born_host: bytes = DEFAULT_BORN_HOST, deliver_at_ms: int | None = None,
        producer_group: str | None = None, dedup: bool = False,
    ) -> PutBatch:  # fmt: skip
        """An ENCODED batch: a checked RocketMQ batch to one queue (timer messages when `deliver_at_ms` is given,
        half messages when `producer_group` is)."""
        return cls(
            BatchForm.ENCODED, encoded=encoded, topic=topic, queue_id=queue_id, born_host=born_host, deliver_at_ms=deliver_at_ms,
            producer_group=producer_group, dedup=dedup,
        )  # fmt: skip

    def __len__(self) -> int:
        if self.form is BatchForm.MESSAGES:
            return len(self.messages)
        if self.form is BatchForm.FIELDS:
            return len(self.fields) if self.packed is None else self.packed.messages
        assert self.encoded is not None
        return self.encoded.messages

    def set_messages(self, messages: Sequence[MessageInner]) -> None:
        """Make this a MESSAGES batch of `messages` (a hook that gives each message its own properties)."""
        self.form = BatchForm.MESSAGES
        self.messages = messages
        self.fields = ()
        self.packed = None
        self.encoded = None

    def refused(self) -> None:
        """The put stored nothing: run the `on_refused` callbacks."""
        for undo in self.on_refused:
            undo()


def packed_fields(fields: Sequence[MessageFields]) -> tuple[bytes, list[str]]:
    """The messages of a FIELDS batch in RocketMQ's batch encoding, and their UNIQ_KEYs (a missing
    msg_id gets a fresh one). Properties are written as build_message orders them: user properties,
    TAGS, KEYS, UNIQ_KEY."""
    if len(fields) == 1:  # a single produce: the same bytes without the batch's loops
        f = fields[0]
        key = f.msg_id if f.msg_id is not None else new_uniq_key()
        return pack_one(f.body, properties_of(f, key)), [key]
    missing = sum(1 for f in fields if f.msg_id is None)
    fresh = iter(new_uniq_keys(missing)) if missing else iter(())
    uniq_keys = [f.msg_id if f.msg_id is not None else next(fresh) for f in fields]
    data = pack_batch([(f.body, properties_of(f, k), 0) for f, k in zip(fields, uniq_keys, strict=True)])
    return data, uniq_keys


class PackedProduce(NamedTuple):
    """A produce body packed without being parsed into Python objects: a JSON body by store.native.json_produce
    (`packed_json`), a raw body as its one message (`packed_raw`)."""

    data: bytes  # RocketMQ's batch encoding, as packed_fields packs the body's messages
    messages: int  # how many it holds (`packed_binary`: at least this many; the lane's kernel counts and limits them)
    queue_id: int  # the queue every message named; -1: none named one
    is_batch: bool  # {"messages": [...]}
    head: bytes  # the UNIQ_KEY head the keys were written with (UniqKeyGenerator.reserve)
    first: int  # the first key's counter value

    @property
    def uniq_keys(self) -> list[str]:
        """Each message's UNIQ_KEY, fresh (built when asked for: render_produce_reply writes them itself)."""
        return uniq_keys_of(self.head, self.first, self.messages)


def packed_binary(body: bytes, queue_id: int) -> PackedProduce:
    """A binary batch as a producer sent it (RocketMQ's batch encoding) for the put lane (MessageStore.put_lane), not
    checked here: the lane's kernel checks it as check_batch does and declines what check_batch would refuse. Its
    messages carry their own UNIQ_KEYs, or none, as the ENCODED put stores them."""
    return PackedProduce(body, 1, queue_id, True, b"", 0)


def packed_json(body: bytes, max_messages: int, max_body_bytes: int, reserved: bytes) -> PackedProduce | None:
    """A JSON produce body packed as its messages' parsed fields would be (`packed_fields`), without parsing it into
    Python objects; None for a body the caller parses itself (store.native.json_produce says which). `reserved`: the
    property names a producer may not set, separated by NUL bytes."""
    got = json_produce(body, min(max_messages, UNIQ_KEY_CHUNK), max_body_bytes, reserved, reserve_uniq_keys)
    if got is None:
        return None
    data, count, queue_id, is_batch, (head, first) = got
    return PackedProduce(data, count, queue_id, is_batch, head, first)


def packed_raw(body: bytes, queue_id: int, max_body_bytes: int, properties: bytes = b"") -> PackedProduce | None:
    """A raw produce's body as its one message to `queue_id` (-1: none named), packed as `packed_fields` packs it:
    its properties `properties` (RocketMQ's encoding, as properties_of writes a message's TAGS and KEYS; the put's
    batch check refuses ill-formed or oversized ones) and a fresh UNIQ_KEY; None for a body over `max_body_bytes` or
    properties past what a batch item's length field holds with the key, which the caller's own path refuses."""
    if len(body) > max_body_bytes or len(properties) > MAX_RAW_PROPERTIES_BYTES:
        return None
    head, first = reserve_uniq_key()
    data = raw_item(body, properties, head, first)  # raw_item_of's bytes, in one kernel call (every raw produce)
    return _new_tuple(PackedProduce, (data, 1, queue_id, False, head, first))  # PackedProduce(...) without its Python __new__


def raw_item_of(body: bytes, properties: bytes, head: bytes, first: int) -> bytes:
    """The reference of the `raw_item` kernel: a raw produce's one batch item (pack_one) whose properties are
    `properties` and its UNIQ_KEY, `head` and `first`'s low 16 bits in four hex digits."""
    return pack_one(body, b"%s%s\x01%s%04X\x02" % (properties, UNIQ_KEY_NAME, head, first & 0xFFFF))


def properties_of(fields: MessageFields, uniq_key: str) -> bytes:
    """A message's properties in RocketMQ's `name \\x01 value \\x02` encoding (a dedup id joins KEYS and its property)."""
    props = fields.properties
    text = "".join(f"{k}\x01{v}\x02" for k, v in props.items()) if props else ""
    if fields.tags:
        text += f"{PROPERTY_TAGS}\x01{fields.tags}\x02"
    dedup_id = fields.dedup_id
    if fields.keys or dedup_id:
        keys = [*(fields.keys or ()), dedup_id] if dedup_id else fields.keys or []
        text += f"{PROPERTY_KEYS}\x01{KEY_SEPARATOR.join(keys)}\x02"
    if dedup_id:
        text += f"{DEDUP_PROPERTY}\x01{dedup_id}\x02"
    return f"{text}{PROPERTY_UNIQ_KEY}\x01{uniq_key}\x02".encode()


def batch_messages(topic: str, queue_id: int, data: bytes, born_host: bytes) -> list[MessageInner]:
    """The messages of a checked batch (RocketMQ's batch encoding) as MessageInner objects (a hook that gives
    each message its own properties)."""
    msgs: list[MessageInner] = []
    pos = 0
    while pos < len(data):
        total, _magic, _crc, flag, body_len = BATCH_ITEM_HEAD.unpack_from(data, pos)
        body_at = pos + BATCH_ITEM_HEAD.size
        props_at = body_at + body_len
        props_len = int.from_bytes(data[props_at : props_at + 2], "big")
        props = decode_properties(data[props_at + 2 : props_at + 2 + props_len])
        msgs.append(MessageInner(topic, data[body_at:props_at], queue_id, props, flag=flag, born_host=born_host))
        pos += total
    return msgs
