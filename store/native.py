"""The native data-path kernels (store._kernels) with names for their codes and records.

docs/native.md describes each kernel; docs/layouts.md has the byte layouts they read
and write. The Python codec (store.codec.message_codec) stays the reference the kernels are
tested against. Every kernel checks each position and length against its buffer and
returns a stop code first; a malformed batch raises BatchError.
"""

from __future__ import annotations

import enum
import struct
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from store import _kernels
from store._kernels import BatchError

__all__ = [
    "BatchError",
    "BatchErrorCode",
    "CheckedBatch",
    "Stop",
    "check_batch",
    "check_batch_crcs",
    "dispatch_scan",
    "encode_batch",
    "gather",
    "index_put",
    "java_hash",
    "json_produce",
    "pack_batch",
    "prefault",
    "queue_runs",
    "render_produce_reply",
    "sql_eval",
]

java_hash = _kernels.java_hash
check_message = _kernels.check_message


class Stop(enum.IntEnum):
    """Where a kernel stopped (kernels.h's enum stop_code)."""

    DONE = 0
    FILE_FULL = 1
    OUT_FULL = 2
    BLANK = 3
    END = 4
    PARTIAL = 5
    BAD_MAGIC = 6
    BAD_BLANK = 7
    BAD_TOTAL = 8
    BAD_BODY = 9
    BAD_TOPIC = 10
    BAD_PARTS = 11
    BAD_CRC = 12
    COUNT_LIMIT = 13
    SEGMENT_MISS = 14
    BAD_RECORD = 15
    FILTER_DEFER = 16


# Stop by its code: indexing a tuple is a C call, where Stop(code) is two Python frames (the hot kernels' wrappers).
_STOP_OF = tuple(Stop)
assert all(stop.value == code for code, stop in enumerate(_STOP_OF)), "Stop's codes are 0..n-1"

CORRUPT = frozenset({Stop.BAD_MAGIC, Stop.BAD_BLANK, Stop.BAD_TOTAL, Stop.BAD_BODY, Stop.BAD_TOPIC, Stop.BAD_PARTS, Stop.BAD_CRC})


class BatchErrorCode(enum.IntEnum):
    """Why a batch is refused (BatchError.args[1]; kernels.h's enum batch_error)."""

    TRUNCATED = 1
    BAD_TOTAL = 2
    BAD_MAGIC = 3
    BAD_CRC = 4
    BAD_BODY = 5  # negative body length
    BAD_PROPERTIES = 6  # properties longer than 32767 bytes
    BODY_TOO_LARGE = 7
    # check_batch with limits and property checks only:
    PROPERTIES_TOO_LARGE = 8
    BAD_PROPERTY = 9  # not `name \x01 value \x02` pairs of UTF-8 with non-empty names
    RESERVED_PROPERTY = 10  # one of RESERVED_BATCH_PROPERTIES
    BAD_TAGS = 11
    BAD_UNIQ_KEY = 12
    TOO_MANY = 13


# Properties a batch item may not carry (encode.c's is_reserved): a delay, which a batch takes as
# a whole (delay_ms / deliver_at_ms; RocketMQ's broker reads a delay only from the batch's own
# properties, so one on an item is never honoured); the real destination the put path sets; the
# timer's own marks (an item with TIMER_OUT_MS is taken for a timer copy: a delayed batch would store
# it at once); and the transaction's (a batch's producer group is the X-Tidemq-Transaction header).
# These are the names the JSON produce reserves but for the ones an item carries as its own fields
# (TAGS, KEYS, UNIQ_KEY, TIDEMQ_DEDUP_ID) and WAIT, which every RocketMQ producer sets; the rest of
# what a RocketMQ producer sets on an item is stored as given; docs/http-api.md lists them.
RESERVED_BATCH_PROPERTIES = frozenset(
    {"DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "REAL_TOPIC", "REAL_QID"}
    | {"TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES"}
    | {"TRAN_MSG", "PGROUP", "TRANSACTION_CHECK_TIMES", "TIDEMQ_TRAN_ACTION"}
)


# One batch item as RocketMQ's MessageDecoder.encodeMessages writes it (before body and properties).
BATCH_ITEM_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODY length
BATCH_FIXED_BYTES = 22
# encode_batch's output: physical offset and stored size of each message (host order).
OFFSET_AND_SIZE = struct.Struct("=qq")
# dispatch_scan's record: the 20-byte big-endian consume-queue entry, then host-order fields.
RECORD = struct.Struct("=20siqqqqqqiiiiii")
RECORD_FIELDS = (
    "cq_entry queue_id queue_offset store_timestamp commitlog_offset tags_code topic_pos properties_pos "
    "size sys_flag topic_length properties_length flags key_count"
).split()
FLAG_DELAY_FALLBACK = 1  # the tags code of a delayed message is left for delay_due_time_ms
FLAG_NO_QUEUE = 2  # a prepared or rolled-back transaction message: queue_runs gives it no entry
# dispatch_scan's index key: key hash (as IndexFile stores it), record number, offset, store time.
KEY = struct.Struct("=iiqq")
# gather's per-message meta: physical offset, entry index, size.
META = struct.Struct("=qii")
SCAN_UNIQ_KEY = 1
SCAN_CHECK_CRC = 2
# queue_runs' run: the entries of consecutive queue offsets of one queue (host order).
RUN = struct.Struct("=qqqqqiiiiiiii8q")
RUN_FIELDS = (
    "first_queue_offset first_offset end_offset last_store_timestamp topic_pos topic_length queue_id count entries_at "
    "first_record last_record code_count _pad"
).split()
RUN_CODES = 8  # tags codes a run lists; a code_count above it means more (or one not known yet)
assert RECORD.size == 96 and KEY.size == 24 and META.size == 16 and RUN.size == 136


def pack_batch(messages: Iterable[tuple[bytes, bytes, int]]) -> bytes:
    """RocketMQ's batch encoding of (body, properties bytes, flag) items, MAGICCODE and BODYCRC 0."""
    parts: list[bytes] = []
    for body, props, flag in messages:
        parts += (BATCH_ITEM_HEAD.pack(BATCH_FIXED_BYTES + len(body) + len(props), 0, 0, flag, len(body)), body)
        parts += (len(props).to_bytes(2, "big"), props)
    return b"".join(parts)


def pack_one(body: bytes, props: bytes, flag: int = 0) -> bytes:
    """pack_batch of one item."""
    return b"".join(
        (
            BATCH_ITEM_HEAD.pack(BATCH_FIXED_BYTES + len(body) + len(props), 0, 0, flag, len(body)),
            body,
            len(props).to_bytes(2, "big"),
            props,
        )
    )


def check_batch(
    batch: Any,
    max_body_bytes: int,
    *,
    max_count: int = -1,
    max_properties_bytes: int = 0x7FFF,
    check_properties: bool = False,
) -> tuple[int, int]:
    """(message count, stored bytes without the topic) of a well-formed batch; BatchError otherwise.

    Every length is checked against the batch and the limits (`max_count` < 0: no limit); with
    `check_properties` each item's properties must also be `name \x01 value \x02` pairs of
    UTF-8 with non-empty names, none of RESERVED_BATCH_PROPERTIES, TAGS a valid tag and UNIQ_KEY
    a valid message id (as the JSON produce checks them). The error's `index` is the item's number.
    """
    return _kernels.check_batch(batch, max_body_bytes, max_count, max_properties_bytes, check_properties)


def check_batch_crcs(
    batch: Any,
    max_body_bytes: int,
    *,
    max_count: int = -1,
    max_properties_bytes: int = 0x7FFF,
    check_properties: bool = False,
) -> tuple[int, int, bytes, bool]:
    """check_batch, the BODYCRC it computed of each item (host-order uint32s): encode_batch takes
    them as they are (`crcs`), so a checked batch's bodies are read for their CRC once; and whether
    an item has the TIDEMQ_DEDUP_ID property (looked for only with `check_properties`), so an
    idempotent produce is found without another pass over the batch."""
    return _kernels.check_batch(batch, max_body_bytes, max_count, max_properties_bytes, check_properties, True)


class CheckedBatch(NamedTuple):
    """A batch check_batch accepted: its bytes (immutable, so they stay as checked) and its count.

    `crcs`: the BODYCRC of each item as check_batch_crcs computed it over these bytes (b"": none,
    encode_batch computes them). `has_dedup_id`: an item has the TIDEMQ_DEDUP_ID property, as
    check_batch_crcs found it (the put's dedup hook reads the batch's ids only then)."""

    data: bytes
    messages: int
    stored_bytes_without_topic: int
    crcs: bytes
    has_dedup_id: bool


# json_produce(body, max_messages, max_body, reserved, reserve) -> (packed, count, queue_id, is_batch, (head, first))
# or None. A JSON produce body in RocketMQ's batch encoding, as store.put.put_batch.packed_fields packs the messages
# app.produce_parse.parse_json makes of it (docs/native.md "JSON produce"): queue_id is the queue every message named
# or -1; (head, first) is what `reserve(count)` returned: the UNIQ_KEY head and first counter value the keys were
# written with. None for a body the kernel leaves to the Python path: any shape or value it does not take, anything
# the Python path would refuse, more than `max_messages` messages, a body over `max_body` bytes, a property named in
# `reserved` (names separated by NUL bytes). The kernel itself (no wrapper: a call on every produce).
json_produce = _kernels.json_produce

# render_produce_reply(head, first, host_hex, queue_id, first_queue_offset, store_timestamp, offsets, is_batch) -> bytes.
# The JSON reply to a put of messages json_produce packed with keys `head` + `first`..: a SendResult, or
# {"kind": "batch", "results": [...]} of them, as orjson writes the reply app.routes_produce.packed_reply builds.
# `offsets`: EncodedItems.offsets (each message's commitlog offset and size, host-order int64s); `host_hex`: the
# store host in upper-case hex. The kernel itself (no wrapper: a call on every produce).
render_produce_reply = _kernels.render_produce_reply


def render_views(data: Any) -> bytes | None:
    """The JSON views of the stored messages in `data` (back to back, as a get gathers them), joined by
    commas: each as the HTTP API shows a message (docs/http-api.md) and orjson writes it, without the
    host texts. None when one of them takes the Python path (a compressed body, a topic or properties
    that are not UTF-8, a property named twice, more than 64 properties, lengths that disagree)."""
    return _kernels.render_views(data)


def render_received(message: Any, topic: str, reconsume_times: int, handle: str, invisible_until_ms: int) -> bytes | None:
    """One received message's JSON view (`message`: its stored bytes): its view as render_views writes it, with the
    topic asked for and `reconsume_times` in their places, then the receipt handle and `invisible_until_ms`; None
    when render_views would leave the message to the Python path."""
    return _kernels.render_received(message, topic.encode(), reconsume_times, handle.encode(), invisible_until_ms)


def prefault(buf: Any, pos: int, length: int) -> int:
    """Fault buf[pos:pos+length] in for writing, GIL released; 1: MADV_POPULATE_WRITE, 2: one write per page.

    No byte changes (each page gets an atomic add of zero), so it may run beside a writer.
    OSError when the kernel refuses (ENOMEM, EFAULT).
    """
    return _kernels.prefault(buf, pos, length)


class Encoded(NamedTuple):
    stop: Stop
    written: int  # messages written
    batch_pos: int
    dest_pos: int


def encode_batch(
    dest: Any,
    dest_pos: int,
    dest_limit: int,
    batch: Any,
    batch_pos: int,
    out: Any,
    max_count: int,
    *,
    topic: bytes,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: bytes,
    born_timestamp: int,
    born_host: bytes,
    sys_flag: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    crcs: Any = None,
) -> Encoded:
    """Write batch items from `batch_pos` as stored messages at `dest_pos` (physical offset
    `physical_offset`), queue offsets from `queue_offset` on, until the batch ends,
    `max_count` are written, the next one and an end marker do not fit below
    `dest_limit` (FILE_FULL) or `out` has no room for its offset and size (OUT_FULL).

    `crcs` (check_batch_crcs's, from the item at `batch_pos` on): the BODYCRCs to write, taken
    unchecked; items past its end have theirs checked and computed as without it."""
    r = _kernels.encode_batch(
        dest, dest_pos, dest_limit, batch, batch_pos, out, max_count, topic, queue_id, sys_flag, born_timestamp, born_host,
        store_timestamp, store_host, reconsume_times, prepared_transaction_offset, queue_offset, physical_offset, crcs,
    )  # fmt: skip
    return Encoded(_STOP_OF[r[0]], r[1], r[2], r[3])


class Scanned(NamedTuple):
    stop: Stop
    pos: int
    records: int
    keys: int


def delay_levels_array(levels_ms: Sequence[int]) -> bytes:
    return array("q", levels_ms).tobytes()


def dispatch_scan(
    buf: Any,
    pos: int,
    limit: int,
    records: Any,
    keys: Any,
    *,
    uniq_key_index: bool,
    check_crc: bool = False,
    delay_levels: bytes | None = None,
) -> Scanned:
    """Check and decode the messages of buf[pos:limit] into `records` and index `keys`.

    Stops at `limit` (DONE), at an end-of-file marker (BLANK, pos at the marker), where
    nothing whole is written (END, PARTIAL), at a corrupt message (a code in CORRUPT), or
    before a message whose record or keys do not fit (OUT_FULL).
    """
    flags = (SCAN_UNIQ_KEY if uniq_key_index else 0) | (SCAN_CHECK_CRC if check_crc else 0)
    r = _kernels.dispatch_scan(buf, pos, limit, records, keys, flags, delay_levels)
    return Scanned(_STOP_OF[r[0]], r[1], r[2], r[3])


def runs_scratch_bytes(n_records: int) -> int:
    """Bytes of the scratch buffer queue_runs needs for `n_records` records."""
    slots = 2
    while slots < 2 * n_records:
        slots <<= 1
    return 4 * (n_records + slots)


class Grouped(NamedTuple):
    stop: Stop
    record_pos: int  # the first record not grouped (OUT_FULL: it needs a run past `runs`)
    runs: int
    fallbacks: int  # records with FLAG_DELAY_FALLBACK among those grouped


def queue_runs(buf: Any, records: Any, n_records: int, record_from: int, runs: Any, entries: Any, scratch: Any) -> Grouped:
    """Group records [record_from, n_records) of a dispatch_scan of `buf` into runs: the messages of one
    queue with consecutive queue offsets, each after the one before it in the log. The consume-queue
    entries of each run are copied, contiguous, to `entries` from the run's `entries_at`; afterwards
    the int32 at scratch[4 * (i - record_from)] is the entry index of record i."""
    r = _kernels.queue_runs(buf, records, n_records, record_from, runs, entries, scratch)
    return Grouped(_STOP_OF[r[0]], r[1], r[2], r[3])


class IndexHeader(NamedTuple):
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


class IndexPut(NamedTuple):
    stop: Stop  # DONE, or FILE_FULL at key_pos
    key_pos: int
    current_record: int  # pass to the next call: its keys continue without the indexed-before check
    last_put_record: int  # record of the last key put, -1 when none was
    header: IndexHeader


def index_put(
    file: Any, slot_num: int, index_num: int, header: IndexHeader, keys: Any, key_from: int, key_to: int, current_record: int
) -> IndexPut:
    """Add dispatch_scan keys [key_from, key_to) to an index file as IndexFile.put_key does, skipping
    the keys of a message at or below the file's end offset (indexed before), and write the header."""
    r = _kernels.index_put(file, slot_num, index_num, (*header,), keys, key_from, key_to, current_record)
    return IndexPut(_STOP_OF[r[0]], r[1], r[2], r[3], IndexHeader(*r[4]))


class GatherLimits(NamedTuple):
    """MessageGetter's transfer limits; `disk_below_phy` is max offset minus the memory window."""

    max_count: int
    count_in_memory: int
    bytes_in_memory: int
    count_on_disk: int
    bytes_on_disk: int
    disk_below_phy: int
    min_phy: int
    max_phy: int  # the log's end: an entry reaching past it is damaged
    max_size: int  # the longest message a put can store: a longer entry is damaged


class Gathered(NamedTuple):
    stop: Stop
    examined: int
    taken: int  # messages copied into out
    bytes: int
    removed_seen: bool
    damaged: int  # entries skipped because they point at no message of their size


class GatherState(NamedTuple):
    """Where a resumed gather starts: `out` holds `bytes` and `meta` the records of `taken` messages."""

    examined: int = 0
    taken: int = 0
    bytes: int = 0
    removed_seen: bool = False
    damaged: int = 0
    skip_below: int = -1  # entries below this offset count as removed until a message is taken
    filter_passed: int = -1  # the entry (by index) whose SQL92 filter the caller found TRUE after FILTER_DEFER


def tag_codes_array(codes: Iterable[int]) -> bytes:
    return array("q", sorted(codes)).tobytes()


def ranges_array(ranges: Iterable[tuple[int, int]]) -> bytes:
    """[start, end) byte ranges in ascending order as the int64 pairs gather takes."""
    return array("q", [x for r in ranges for x in r]).tobytes()


def gather(
    entries: Any,
    n: int,
    segments: Sequence[tuple[int, Any]],
    out: Any,
    meta: Any,
    limits: GatherLimits,
    codes: bytes | None = None,
    tags: tuple[bytes, ...] | None = None,
    damaged_ranges: bytes | None = None,
    start: GatherState | None = None,
    sql: bytes | None = None,
) -> Gathered:
    """Copy the stored messages of `n` consume-queue entries into `out`, as MessageGetter
    collects them; `segments` are (physical offset, readable bytes) of commitlog files.

    Entries whose offset lies in `damaged_ranges` (ranges_array) are skipped like gap entries.
    `sql` is an SQL92 filter's program (store.filter.sql_program): a message is taken only when it
    evaluates TRUE over the message's properties, and the call stops with FILTER_DEFER at a
    message whose outcome it leaves to the caller (sql_eval's DEFER).
    With `start` the call continues one that stopped (OUT_FULL, SEGMENT_MISS, BAD_PARTS,
    FILTER_DEFER) after the caller dealt with the entry it stopped at; the counts returned include it.
    """
    r = _kernels.gather(entries, n, segments, out, meta, tuple(limits), codes, tags, damaged_ranges, start, sql)
    return Gathered(_STOP_OF[r[0]], r[1], r[2], r[3], bool(r[4]), r[5])


class SqlOutcome(enum.IntEnum):
    """What an SQL92 program gives over one message's properties (kernels.h's enum sql_outcome)."""

    FALSE = 0
    TRUE = 1  # the only outcome that passes the filter
    UNKNOWN = 2  # null
    ABORTED = 3  # RocketMQ's evaluation throws (a failed number conversion, ...)
    DEFER = 4  # left to the Python evaluator: digits outside ASCII, a hexadecimal float, a long number, invalid UTF-8


def sql_eval(program: bytes, properties: Any) -> SqlOutcome:
    """Evaluate an SQL92 program (store.filter.sql_program) over stored properties (`name \x01 value \x02` bytes)."""
    return SqlOutcome(_kernels.sql_eval(program, properties))
