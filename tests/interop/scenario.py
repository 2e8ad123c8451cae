"""The RocketMQ store the interop tests serve: one of each kind of message a 4.9.8 broker stores.

- `orders` (4 queues): IPv4 and IPv6 born and store hosts in every combination, two zlib bodies
  over 4 KiB (a 4.9.8 producer's 0x301 and an older one's 0x1), a prepared (0x4), commit (0x8) and
  rollback (0xC) transaction message, keys, tags and UNIQ_KEYs. Queue 1 starts at offset 3: its
  first three messages were in the commitlog file that was cleaned up, and its consume queue holds
  fillPreBlank units for them (as when RocketMQ rebuilt its consume queues from the commitlog
  left: ConsumeQueue#putMessagePositionInfo fills a queue's first file up to a first offset that
  is not 0). Their commitlog offset 0 lies below the commitlog's minimum, which is how RocketMQ's
  ConsumeQueue#correctMinOffset (called at load by DefaultMessageStore#recoverTopicQueueTable)
  passes over them to the queue's real minimum. Queue 3 is empty.
- `audit` (2 queues): enough messages to cross commitlog files (end-of-file blanks) and consume
  queue files.
- `SCHEDULE_TOPIC_XXXX`: a level-2 message already delivered (its copy is `delayed` offset 0), a
  level-1 message due long ago and not yet delivered (delayOffset.json says so), and a level-18 one
  (2 h) not yet due.
- consumerOffset.json: group `billing` left `orders` at 2, 4, 0, 0 and `reporting` left `audit`
  at 10, 10.

`build` returns the writer, whose `messages` and `queue()` are the tests' expectations.
"""

from __future__ import annotations

import time
from typing import Any

from tests.interop.rocketmq_store import (
    COMPRESSED_FLAG,
    COMPRESSION_ZLIB_TYPE,
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Host,
    Message,
    RocketMQStoreWriter,
    StoreLayout,
    TopicConfig,
    uniq_key,
)

LAYOUT = StoreLayout(commitlog_file_bytes=65536, cq_file_bytes=200, hash_slots=64, index_entries=512)
FIRST_COMMITLOG_OFFSET = 65536  # commitlog file 0 was cleaned up

STORE_V4 = Host("10.0.0.7", 10911)
STORE_V6 = Host("fd00::7", 10911)
BORN_V4 = Host("192.168.1.20", 53412)
BORN_V6 = Host("2001:db8::20", 53413)

# The tidemq settings that must match LAYOUT (the [store] table of the server's config).
TIDEMQ_STORE_SETTINGS = f"""
[store]
mapped_file_size_commit_log_bytes = {LAYOUT.commitlog_file_bytes}
mapped_file_size_consume_queue_bytes = {LAYOUT.cq_file_bytes}
max_hash_slot_num = {LAYOUT.hash_slots}
max_index_num = {LAYOUT.index_entries}
max_message_size_bytes = 16384
max_properties_size_bytes = 2048
"""

USER_TOPICS = ("orders", "audit", "delayed")
TOPICS = [
    TopicConfig("orders", 4, 4),
    TopicConfig("audit", 2, 2),
    TopicConfig("delayed", 1, 1),
    TopicConfig(SCHEDULE_TOPIC, 18, 18),
    TopicConfig("TBW102", 8, 8, perm=7),
    TopicConfig("%RETRY%billing", 1, 1),
]
CONSUMER_OFFSETS = {
    "orders@billing": {0: 2, 1: 4, 2: 0, 3: 0},
    "%RETRY%billing@billing": {0: 0},
    "audit@reporting": {0: 10, 1: 10},
}
DELAY_OFFSETS = {1: 0, 2: 1, 18: 0}


class _Producer:
    """Stamps born/store times and UNIQ_KEYs as a producer and broker would, in order."""

    def __init__(self, writer: RocketMQStoreWriter, base_ms: int) -> None:
        self.writer = writer
        self.clock = base_ms
        self.counter = 0

    def put(self, topic: str, queue_id: int, body: bytes, born: Host = BORN_V4, store: Host = STORE_V4, **kw: Any) -> Message:
        self.clock += 7
        self.counter += 1
        props = {"WAIT": "true", "CLUSTER": "DefaultCluster", **kw.pop("properties", {})}
        uniq = kw.pop("uniq", None) or uniq_key(born.ip, 4242, 0x1B6D3586, self.clock - 3, self.counter)
        born_ms = kw.pop("born_ms", None) or self.clock - 3
        msg = Message(topic, queue_id, body, born, store, born_ms, self.clock, uniq=uniq, properties=props, **kw)
        return self.writer.append(msg)


def _text(label: str, size: int) -> bytes:
    """A compressible UTF-8 body of `size` bytes."""
    line = f"{label}: the quick brown fox jumps over the lazy dog 0123456789\n".encode()
    return (line * (size // len(line) + 1))[:size]


def build(root: str, with_index: bool = True, base_ms: int | None = None, index_upto: int | None = None) -> RocketMQStoreWriter:
    """Write the store under `root` and return its writer (the expectations); `index_upto`: see RocketMQStoreWriter.write."""
    writer = RocketMQStoreWriter(root, LAYOUT, FIRST_COMMITLOG_OFFSET)
    writer.start_queue_at("orders", 1, 3)
    p = _Producer(writer, base_ms if base_ms is not None else int(time.time() * 1000) - 10 * 60_000)
    p.put("orders", 0, b"order 1 paid", tags="paid", keys=["order-1", "cust-7"])
    p.put("orders", 1, b"order 2 new", BORN_V6, STORE_V4, tags="new", keys=["order-2"])
    p.put("orders", 0, b"order 3 paid", BORN_V4, STORE_V6, tags="paid", keys=["order-3"])
    tran = {"TRAN_MSG": "true", "PGROUP": "pg-orders"}
    half = p.put("orders", 2, b"order 4 pending", tags="paid", keys=["order-4"], transaction=TRANSACTION_PREPARED_TYPE, properties=tran)
    p.put("orders", 0, b"order 1 shipped", BORN_V6, STORE_V6, tags="shipped", keys=["order-1"])
    p.put(
        "orders", 2, b"order 4 pending", tags="paid", keys=["order-4"], uniq=half.uniq,
        transaction=TRANSACTION_COMMIT_TYPE, prepared_offset=half.commitlog_offset, properties=tran,
    )  # fmt: skip
    half5 = p.put("orders", 2, b"order 5 pending", tags="paid", keys=["order-5"], transaction=TRANSACTION_PREPARED_TYPE, properties=tran)
    p.put(
        "orders", 2, b"order 5 pending", tags="paid", keys=["order-5"], uniq=half5.uniq,
        transaction=TRANSACTION_ROLLBACK_TYPE, prepared_offset=half5.commitlog_offset, properties=tran,
    )  # fmt: skip
    p.put("orders", 0, _text("bulk 1", 6000), tags="bulk", keys=["bulk-1"], compress=COMPRESSED_FLAG)
    p.put(
        "orders",
        1,
        _text("bulk 2", 9000),
        BORN_V6,
        STORE_V6,
        tags="bulk",
        keys=["bulk-2"],
        compress=COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE,
    )
    p.put("orders", 1, b"order 6 new", tags="new", keys=["order-6"])
    _delays(p)
    for i in range(50):
        born, store = (BORN_V6, STORE_V6) if i % 7 == 3 else (BORN_V4, STORE_V4)
        p.put("audit", i % 2, _text(f"audit {i}", 1500), born, store, tags="audit", keys=[f"audit-{i}"])
    p.put("orders", 0, b"order 7 paid", BORN_V4, STORE_V6, tags="paid", keys=["order-7"])
    writer.topics = TOPICS
    writer.consumer_offsets = CONSUMER_OFFSETS
    writer.delay_offsets = DELAY_OFFSETS
    writer.write(with_index=with_index, index_upto=index_upto)
    return writer


def _delays(p: _Producer) -> None:
    """CommitLog#asyncPutMessage's delay rewrite (REAL_TOPIC, REAL_QID; queue = level - 1) and one
    ScheduleMessageService#messageTimeup copy, whose stored properties keep DELAY, REAL_TOPIC and REAL_QID."""
    real = {"REAL_TOPIC": "delayed", "REAL_QID": "0"}
    delivered = p.put(SCHEDULE_TOPIC, 1, b"remind 1", tags="reminder", keys=["late-1"], properties={"DELAY": "2", **real})
    p.clock += 5000
    p.put(
        "delayed",
        0,
        b"remind 1",
        tags="reminder",
        keys=["late-1"],
        uniq=delivered.uniq,
        born_ms=delivered.born_ms,
        properties={"DELAY": "2", **real},
    )
    p.put(SCHEDULE_TOPIC, 0, b"remind 2", tags="reminder", keys=["late-2"], properties={"DELAY": "1", **real})
    p.put(SCHEDULE_TOPIC, 17, b"remind 3", tags="reminder", keys=["late-3"], properties={"DELAY": "18", **real})


def consumable(writer: RocketMQStoreWriter, topic: str) -> list[Message]:
    """Every consumable message of a topic, in commitlog order."""
    return [m for m in writer.messages if m.topic == topic and m.consumable]
