"""A writer of a RocketMQ 4.x store directory, from RocketMQ 4.9.8's published layout.

This module is deliberately independent of tidemq: it imports nothing from store/, app/,
pipeline/ or tidemq/, so the interop tests hold tidemq to RocketMQ's bytes and not to its own
codec. Each part follows the RocketMQ 4.9.8 class that writes it:

- commitlog/: CommitLog.MessageExtEncoder#encode (the 17 fields, IPv6 hosts taking 20 bytes when
  MessageSysFlag BORNHOST_V6_FLAG 0x10 / STOREHOSTADDRESS_V6_FLAG 0x20 are set, see
  CommitLog#calMsgLength), DefaultAppendMessageCallback#doAppend (QUEUEOFFSET and PHYSICALOFFSET
  filled in at append; prepared and rollback messages get queue offset 0 and do not advance the
  queue; a message that does not fit with END_FILE_MIN_BLANK_LENGTH (8) left becomes a blank:
  TOTALSIZE = the bytes left, MAGICCODE = BLANK_MAGIC_CODE, the rest of the file left as zeros);
  BODYCRC is UtilAll#crc32 (java.util.zip.CRC32 & 0x7FFFFFFF) of the body as stored (compressed
  when COMPRESSED_FLAG is set: DefaultMQProducerImpl#tryToCompressMessage deflates bodies of at
  least compressMsgBodyOverHowmuch = 4096 bytes, level 5, zlib format; 4.9.8 also sets the
  compression type bits, COMPRESSION_ZLIB_TYPE = 3 << 8, older producers only 0x1);
  properties are MessageDecoder#messageProperties2String (name 0x01 value 0x02 per property).
- consumequeue/: ConsumeQueue#putMessagePositionInfo (20-byte units: commitlog offset 8, size 4,
  tags code 8; tags code MessageExtBrokerInner#tagsString2tagsCode = String#hashCode, for
  SCHEDULE_TOPIC_XXXX ScheduleMessageService#computeDeliverTimestamp) and ConsumeQueue#fillPreBlank:
  a queue whose first entry is not at its file's start gets units (0, Integer.MAX_VALUE, 0) before
  it, as after the consume queues were rebuilt from a commitlog whose first files were cleaned up.
- index/: IndexFile#putKey and IndexHeader (40-byte header, 4-byte slots holding the newest entry
  number, 20-byte entries: hash 4, commitlog offset 8, seconds since the file's begin timestamp 4,
  previous entry 4; entry 0 unused), keys built by IndexService#buildIndex (`topic#UNIQ_KEY`, then
  `topic#key` per KEYS word; rollback messages skipped), hash IndexFile#indexKeyHashMethod
  (abs(String#hashCode), 0 for Integer.MIN_VALUE); the file named UtilAll#timeMillisToHumanString.
- checkpoint: StoreCheckpoint (physic, logics, index message timestamps at 0, 8, 16 of 4 KiB).
- config/: TopicConfigManager, ConsumerOffsetManager and ScheduleMessageService#encode through
  fastjson's pretty output: tab indents, bean fields sorted, Map<Integer, Long> keys unquoted.
- MessageClientIDSetter#createUniqID for UNIQ_KEY: ip (4 or 16) + pid 2 + class loader hash 4 +
  ms since the start of the month 4 + counter 2, as upper-case hex.

A writer never starts a broker: what it writes is what a stopped RocketMQ broker leaves behind
after a clean shutdown (no `abort` file; `lock` holding the text "lock").
"""

from __future__ import annotations

import calendar
import datetime
import ipaddress
import os
import struct
import zlib
from dataclasses import dataclass, field

MESSAGE_MAGIC_CODE = 0xDAA320A7  # CommitLog.MESSAGE_MAGIC_CODE = -626843481
BLANK_MAGIC_CODE = 0xCBD43194  # CommitLog.BLANK_MAGIC_CODE = -875286124
END_FILE_MIN_BLANK_LENGTH = 8
CQ_UNIT_BYTES = 20
INDEX_HEADER_BYTES = 40
CHECKPOINT_BYTES = 4096
INT_MAX = 2**31 - 1

COMPRESSED_FLAG = 0x1
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
COMPRESSION_ZLIB_TYPE = 0x3 << 8
COMPRESS_OVER_BYTES = 4096  # DefaultMQProducer.compressMsgBodyOverHowmuch
COMPRESS_LEVEL = 5  # DefaultMQProducerImpl.compressLevel

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DELAY_LEVELS_MS = [
    int(x[:-1]) * {"s": 1000, "m": 60_000, "h": 3_600_000}[x[-1]]
    for x in "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h".split()
]


def java_string_hash(text: str) -> int:
    """java.lang.String#hashCode: over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def index_key_hash(key: str) -> int:
    """IndexFile#indexKeyHashMethod: Math.abs of the hash; Integer.MIN_VALUE stays negative, then 0."""
    h = abs(java_string_hash(key))
    return 0 if h > INT_MAX else h


def crc32_masked(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


@dataclass(frozen=True)
class Host:
    """A socket address as MessageExt#socketAddress2ByteBuffer writes it: address bytes, then the port as 4 bytes."""

    ip: str
    port: int

    @property
    def v6(self) -> bool:
        return ipaddress.ip_address(self.ip).version == 6

    def packed(self) -> bytes:
        return ipaddress.ip_address(self.ip).packed + struct.pack(">i", self.port)


def uniq_key(producer_ip: str, pid: int, loader_hash: int, born_ms: int, counter: int) -> str:
    """MessageClientIDSetter#createUniqID, the month start taken in UTC (the producer's default time zone here)."""
    born = datetime.datetime.fromtimestamp(born_ms / 1000, tz=datetime.UTC)
    month_start = calendar.timegm((born.year, born.month, 1, 0, 0, 0)) * 1000
    since = (born_ms - month_start) & 0xFFFFFFFF  # `(int)` of the difference: it wraps past 2^31 ms (the month's 25th day)
    raw = ipaddress.ip_address(producer_ip).packed + struct.pack(">HiIH", pid & 0xFFFF, loader_hash, since, counter)
    return raw.hex().upper()


@dataclass
class Message:
    """One message as a producer sends it; `append` fills in where and how it was stored."""

    topic: str
    queue_id: int
    body: bytes
    born_host: Host
    store_host: Host
    born_ms: int
    store_ms: int
    tags: str | None = None
    keys: list[str] = field(default_factory=list)
    uniq: str | None = None
    properties: dict[str, str] = field(default_factory=dict)  # others, after TAGS/KEYS/UNIQ_KEY
    transaction: int = 0  # one of the TRANSACTION_* types or 0
    compress: int = 0  # 0, COMPRESSED_FLAG, or COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE
    flag: int = 0
    reconsume_times: int = 0
    prepared_offset: int = 0
    # Set by RocketMQStoreWriter.append:
    commitlog_offset: int = -1
    queue_offset: int = -1
    size: int = 0
    stored: bytes = b""

    @property
    def sys_flag(self) -> int:
        flag = self.compress | self.transaction
        if self.born_host.v6:
            flag |= BORNHOST_V6_FLAG
        if self.store_host.v6:
            flag |= STOREHOSTADDRESS_V6_FLAG
        return flag

    @property
    def stored_body(self) -> bytes:
        return zlib.compress(self.body, COMPRESS_LEVEL) if self.compress else self.body

    @property
    def consumable(self) -> bool:
        """Prepared and rollback messages get no consume queue entry (DefaultAppendMessageCallback#doAppend)."""
        return self.transaction not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)

    @property
    def indexed(self) -> bool:
        """IndexService#buildIndex skips rollback messages only."""
        return self.transaction != TRANSACTION_ROLLBACK_TYPE

    def all_properties(self) -> dict[str, str]:
        props: dict[str, str] = {}
        if self.tags is not None:
            props["TAGS"] = self.tags
        if self.keys:
            props["KEYS"] = " ".join(self.keys)
        if self.uniq is not None:
            props["UNIQ_KEY"] = self.uniq
        props.update(self.properties)
        return props

    def properties_bytes(self) -> bytes:
        return "".join(f"{k}\x01{v}\x02" for k, v in self.all_properties().items()).encode("utf-8")

    def tags_code(self) -> int:
        if self.topic == SCHEDULE_TOPIC and "DELAY" in self.properties:
            level = min(int(self.properties["DELAY"]), len(DELAY_LEVELS_MS))
            return self.store_ms + DELAY_LEVELS_MS[level - 1]
        return java_string_hash(self.tags) if self.tags else 0

    @property
    def offset_msg_id(self) -> str:
        """MessageDecoder#createMessageId: store host (8 or 20 bytes) + commitlog offset 8, upper-case hex (32 or 56 chars)."""
        return (self.store_host.packed() + struct.pack(">q", self.commitlog_offset)).hex().upper()

    def encode(self, queue_offset: int, commitlog_offset: int) -> bytes:
        """CommitLog.MessageExtEncoder#encode with the append-time fields filled in."""
        body = self.stored_body
        topic = self.topic.encode("utf-8")
        props = self.properties_bytes()
        head = struct.pack(
            ">iIiiiqqiq",
            0,
            MESSAGE_MAGIC_CODE,
            crc32_masked(body),
            self.queue_id,
            self.flag,
            queue_offset,
            commitlog_offset,
            self.sys_flag,
            self.born_ms,
        )
        tail = (
            self.born_host.packed()
            + struct.pack(">q", self.store_ms)
            + self.store_host.packed()
            + struct.pack(">iqi", self.reconsume_times, self.prepared_offset, len(body))
            + body
            + struct.pack(">B", len(topic))
            + topic
            + struct.pack(">h", len(props))
            + props
        )
        record = head + tail
        return struct.pack(">i", len(record)) + record[4:]


def encode_batch(items: list[tuple[bytes, bytes, int]]) -> bytes:
    """MessageBatch#encode (MessageDecoder#encodeMessages) of (body, properties bytes, flag) items: per
    message MessageDecoder#encodeMessage, TOTALSIZE 4 | MAGICCODE 4 (0) | BODYCRC 4 (0) | FLAG 4 |
    BODY 4 + n | PROPERTIES 2 + m; the broker fills in topic, queue, hosts and times."""
    out = b""
    for body, props, flag in items:
        out += struct.pack(">iiiii", 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props), 0, 0, flag, len(body))
        out += body + struct.pack(">h", len(props)) + props
    return out


def stored_hosts_and_times(record: bytes) -> tuple[Host, int, Host, int]:
    """(born host, born ms, store host, store ms) of a stored message (CommitLog#calMsgLength's field order)."""
    (sys_flag,) = struct.unpack_from(">i", record, 36)
    (born_ms,) = struct.unpack_from(">q", record, 40)
    born_len = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store_len = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    (store_ms,) = struct.unpack_from(">q", record, 48 + born_len)
    store_at = 56 + born_len

    def host(raw: bytes) -> Host:
        return Host(str(ipaddress.ip_address(raw[:-4])), struct.unpack(">i", raw[-4:])[0])

    return host(record[48 : 48 + born_len]), born_ms, host(record[store_at : store_at + store_len]), store_ms


def calc_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """CommitLog#calMsgLength."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8 + 4 + body_len + 1 + topic_len + 2 + props_len


@dataclass
class TopicConfig:
    name: str
    read_queues: int
    write_queues: int
    perm: int = 6
    order: bool = False


@dataclass
class StoreLayout:
    """The sizes the broker was configured with; a reader must be configured alike."""

    commitlog_file_bytes: int = 65536
    cq_file_bytes: int = 10 * CQ_UNIT_BYTES
    hash_slots: int = 64
    index_entries: int = 256


class RocketMQStoreWriter:
    """Lays messages out as a stopped RocketMQ 4.9.8 broker leaves them; `write` puts the files on disk.

    `first_commitlog_offset` (a multiple of the file size) is where the oldest commitlog file
    left starts: the files before it were cleaned up. `start_queue_at` makes a queue's first
    entry a later offset (its earlier messages were in those files); the consume queue then
    holds fillPreBlank units before it.
    """

    def __init__(self, root: str, layout: StoreLayout | None = None, first_commitlog_offset: int = 0) -> None:
        self.root = root
        self.layout = layout or StoreLayout()
        assert first_commitlog_offset % self.layout.commitlog_file_bytes == 0
        self.first_commitlog_offset = first_commitlog_offset
        self.files: dict[int, bytearray] = {}  # start offset -> file bytes
        self.write_offset = first_commitlog_offset
        self.messages: list[Message] = []
        self.blanks: list[tuple[int, int]] = []  # (commitlog offset, bytes)
        self.queue_next: dict[tuple[str, int], int] = {}
        self.queue_first: dict[tuple[str, int], int] = {}
        self.topics: list[TopicConfig] = []
        self.consumer_offsets: dict[str, dict[int, int]] = {}
        self.delay_offsets: dict[int, int] = {}
        self.data_version_ms = 0

    # Building -------------------------------------------------------------------------

    def start_queue_at(self, topic: str, queue_id: int, offset: int) -> None:
        assert (topic, queue_id) not in self.queue_next
        self.queue_next[(topic, queue_id)] = offset
        self.queue_first[(topic, queue_id)] = offset

    def append(self, msg: Message) -> Message:
        """DefaultAppendMessageCallback#doAppend for one message."""
        key = (msg.topic, msg.queue_id)
        queue_offset = 0
        if msg.consumable:
            queue_offset = self.queue_next.setdefault(key, 0)
            self.queue_first.setdefault(key, queue_offset)
        probe = msg.encode(queue_offset, 0)
        file_bytes = self.layout.commitlog_file_bytes
        left = file_bytes - self.write_offset % file_bytes
        if len(probe) + END_FILE_MIN_BLANK_LENGTH > left:
            buf = self._file_at(self.write_offset)
            pos = self.write_offset % file_bytes
            buf[pos : pos + 8] = struct.pack(">iI", left, BLANK_MAGIC_CODE)
            self.blanks.append((self.write_offset, left))
            self.write_offset += left
        msg.commitlog_offset = self.write_offset
        msg.queue_offset = queue_offset
        msg.stored = msg.encode(queue_offset, self.write_offset)
        msg.size = len(msg.stored)
        assert msg.size == calc_msg_length(msg.sys_flag, len(msg.stored_body), len(msg.topic.encode()), len(msg.properties_bytes()))
        buf = self._file_at(self.write_offset)
        pos = self.write_offset % file_bytes
        buf[pos : pos + msg.size] = msg.stored
        self.write_offset += msg.size
        if msg.consumable:
            self.queue_next[key] = queue_offset + 1
        self.messages.append(msg)
        return msg

    def _file_at(self, offset: int) -> bytearray:
        start = offset - offset % self.layout.commitlog_file_bytes
        if start not in self.files:
            self.files[start] = bytearray(self.layout.commitlog_file_bytes)
        return self.files[start]

    # Reading back what was built (the tests' expectations) ---------------------------

    def queue(self, topic: str, queue_id: int) -> list[Message]:
        """The messages of a queue in queue-offset order (what a consumer of it reads)."""
        return [m for m in self.messages if m.topic == topic and m.queue_id == queue_id and m.consumable]

    def queue_min(self, topic: str, queue_id: int) -> int:
        return self.queue_first.get((topic, queue_id), 0)

    def queue_max(self, topic: str, queue_id: int) -> int:
        return self.queue_next.get((topic, queue_id), 0)

    def index_keys(self, upto: int | None = None) -> list[tuple[str, Message]]:
        """(topic#key, message) in the order IndexService#buildIndex puts them, for the first `upto` messages (all by default)."""
        out: list[tuple[str, Message]] = []
        for m in self.messages[:upto]:
            if not m.indexed:
                continue
            if m.uniq is not None:
                out.append((f"{m.topic}#{m.uniq}", m))
            out.extend((f"{m.topic}#{k}", m) for k in m.keys if k)
        return out

    # Writing --------------------------------------------------------------------------

    def write(self, with_index: bool = True, index_upto: int | None = None) -> None:
        """Put the store on disk; `index_upto` writes an index/ that stops after that many messages
        (a stale index, as in a copy whose index/ was taken before the last messages were put)."""
        os.makedirs(self.root, exist_ok=True)
        self._write_commitlog()
        self._write_consume_queues()
        if with_index:
            self._write_index(index_upto)
        self._write_checkpoint()
        self._write_config()
        with open(os.path.join(self.root, "lock"), "wb") as f:  # DefaultMessageStore#start writes "lock" into it
            f.write(b"lock")

    def _write_commitlog(self) -> None:
        directory = os.path.join(self.root, "commitlog")
        os.makedirs(directory, exist_ok=True)
        for start, buf in sorted(self.files.items()):
            with open(os.path.join(directory, f"{start:020d}"), "wb") as f:
                f.write(buf)

    def cq_units(self, topic: str, queue_id: int) -> dict[int, bytes]:
        """Consume queue file start offset -> file bytes (full size, zeros past the last unit)."""
        size = self.layout.cq_file_bytes
        first = self.queue_min(topic, queue_id) * CQ_UNIT_BYTES
        files: dict[int, bytearray] = {}
        filler = struct.pack(">qiq", 0, INT_MAX, 0)
        start = first - first % size
        files[start] = bytearray(size)
        for pos in range(0, first - start, CQ_UNIT_BYTES):
            files[start][pos : pos + CQ_UNIT_BYTES] = filler
        for m in self.queue(topic, queue_id):
            logical = m.queue_offset * CQ_UNIT_BYTES
            file_start = logical - logical % size
            buf = files.setdefault(file_start, bytearray(size))
            pos = logical - file_start
            buf[pos : pos + CQ_UNIT_BYTES] = struct.pack(">qiq", m.commitlog_offset, m.size, m.tags_code())
        return {k: bytes(v) for k, v in files.items()}

    def _write_consume_queues(self) -> None:
        for topic, queue_id in sorted(self.queue_next):
            directory = os.path.join(self.root, "consumequeue", topic, str(queue_id))
            os.makedirs(directory, exist_ok=True)
            for start, data in sorted(self.cq_units(topic, queue_id).items()):
                with open(os.path.join(directory, f"{start:020d}"), "wb") as f:
                    f.write(data)

    def index_file(self, upto: int | None = None) -> tuple[str, bytes]:
        """One IndexFile holding the keys of the first `upto` messages (all by default; index_entries must be large enough)."""
        slots, entries = self.layout.hash_slots, self.layout.index_entries
        data = bytearray(INDEX_HEADER_BYTES + 4 * slots + CQ_UNIT_BYTES * entries)
        begin_ts = end_ts = begin_phy = end_phy = 0
        slot_count, count = 0, 1
        for key, m in self.index_keys(upto):
            assert count < entries, "index_entries too small for the keys"
            h = index_key_hash(key)
            slot_pos = INDEX_HEADER_BYTES + (h % slots) * 4
            (prev,) = struct.unpack_from(">i", data, slot_pos)
            if prev <= 0 or prev > count:
                prev = 0
            diff = 0 if begin_ts <= 0 else max(0, min(INT_MAX, (m.store_ms - begin_ts) // 1000))
            entry_pos = INDEX_HEADER_BYTES + 4 * slots + count * CQ_UNIT_BYTES
            struct.pack_into(">iqii", data, entry_pos, h, m.commitlog_offset, diff, prev)
            struct.pack_into(">i", data, slot_pos, count)
            if count <= 1:
                begin_phy, begin_ts = m.commitlog_offset, m.store_ms
            if prev == 0:
                slot_count += 1
            count += 1
            end_phy, end_ts = m.commitlog_offset, m.store_ms
        struct.pack_into(">qqqqii", data, 0, begin_ts, end_ts, begin_phy, end_phy, slot_count, count)
        first = next(m for m in self.messages if m.indexed)
        name = datetime.datetime.fromtimestamp(first.store_ms / 1000, tz=datetime.UTC).strftime("%Y%m%d%H%M%S%f")[:17]
        return name, bytes(data)

    def _write_index(self, upto: int | None) -> None:
        directory = os.path.join(self.root, "index")
        os.makedirs(directory, exist_ok=True)
        name, data = self.index_file(upto)
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)

    def checkpoint_bytes(self) -> bytes:
        last = max(m.store_ms for m in self.messages)
        logics = max(m.store_ms for m in self.messages if m.consumable)
        index = max(m.store_ms for m in self.messages if m.indexed)
        return struct.pack(">qqq", last, logics, index).ljust(CHECKPOINT_BYTES, b"\0")

    def _write_checkpoint(self) -> None:
        with open(os.path.join(self.root, "checkpoint"), "wb") as f:
            f.write(self.checkpoint_bytes())

    def _write_config(self) -> None:
        directory = os.path.join(self.root, "config")
        os.makedirs(directory, exist_ok=True)
        version_ms = self.data_version_ms or max(m.store_ms for m in self.messages)
        files = {
            "topics.json": fastjson_topics(self.topics, version_ms, counter=len(self.topics)),
            "consumerOffset.json": fastjson_offset_table({k: v for k, v in self.consumer_offsets.items()}),
            "delayOffset.json": fastjson_int_map_object("offsetTable", self.delay_offsets),
        }
        for name, text in files.items():
            for suffix in ("", ".bak"):  # ConfigManager#persist (MixAll#string2File) keeps the previous copy as .bak
                with open(os.path.join(directory, name + suffix), "w", encoding="utf-8") as f:
                    f.write(text)


# fastjson's pretty output (JSON.toJSONString(object, true)) ----------------------------


def _int_map(table: dict[int, int], indent: str) -> str:
    """A Map<Integer, Long> as fastjson writes it: keys unquoted, entries on one line, the brace on the next."""
    return "{" + ",".join(f"{k}:{v}" for k, v in sorted(table.items())) + "\n" + indent + "}"


def fastjson_offset_table(table: dict[str, dict[int, int]]) -> str:
    """ConsumerOffsetManager#encode(true): {"offsetTable": {"topic@group": {queueId: offset}}}."""
    entries = [f'\t\t"{name}":{_int_map(offsets, chr(9) * 2)}' for name, offsets in table.items()]
    return '{\n\t"offsetTable":{\n' + ",\n".join(entries) + "\n\t}\n}"


def fastjson_int_map_object(field_name: str, table: dict[int, int]) -> str:
    """ScheduleMessageService#encode(true): {"offsetTable": {level: offset}}."""
    return '{\n\t"' + field_name + '":' + _int_map(table, "\t") + "\n}"


def fastjson_topics(topics: list[TopicConfig], version_ms: int, counter: int) -> str:
    """TopicConfigManager#encode(true): dataVersion and topicConfigTable, each bean's fields sorted by name."""
    lines = ["{", '\t"dataVersion":{', f'\t\t"counter":{counter},', f'\t\t"timestamp":{version_ms}', "\t},", '\t"topicConfigTable":{']
    blocks = []
    for t in topics:
        fields = [
            f'\t\t\t"order":{"true" if t.order else "false"}',
            f'\t\t\t"perm":{t.perm}',
            f'\t\t\t"readQueueNums":{t.read_queues}',
            '\t\t\t"topicFilterType":"SINGLE_TAG"',
            f'\t\t\t"topicName":"{t.name}"',
            '\t\t\t"topicSysFlag":0',
            f'\t\t\t"writeQueueNums":{t.write_queues}',
        ]
        blocks.append(f'\t\t"{t.name}":{{\n' + ",\n".join(fields) + "\n\t\t}")
    lines.append(",\n".join(blocks))
    lines += ["\t}", "}"]
    return "\n".join(lines)
