"""The commitlog message layout (RocketMQ 4.x, big-endian; docs/layouts.md has the table).

    1 TOTALSIZE 4 | 2 MAGICCODE 4 | 3 BODYCRC 4 | 4 QUEUEID 4 | 5 FLAG 4 |
    6 QUEUEOFFSET 8 | 7 PHYSICALOFFSET 8 | 8 SYSFLAG 4 | 9 BORNTIMESTAMP 8 |
    10 BORNHOST 8|20 | 11 STORETIMESTAMP 8 | 12 STOREHOST 8|20 | 13 RECONSUMETIMES 4 |
    14 PREPARED TRANSACTION OFFSET 8 | 15 BODY 4+n | 16 TOPIC 1+n | 17 PROPERTIES 2+n

A host is an IPv4 address and a port (8 bytes), or with its SYSFLAG bit (BORNHOST_V6_FLAG
0x10, STOREHOSTADDRESS_V6_FLAG 0x20; RocketMQ's MessageSysFlag) an IPv6 address and a port
(20 bytes); every field after it moves by 12 bytes (MessageDecoder, CommitLog.calMsgLength).

A file that cannot hold the next message plus 8 bytes gets an end marker:
TOTALSIZE = the bytes left in the file, MAGICCODE = BLANK_MAGIC_CODE.

BODYCRC is RocketMQ's `UtilAll.crc32`: zlib's CRC32 masked to 31 bits.
Invariants: a decoded message is only returned after its TOTALSIZE matches the sum
of its parts, its magic code is MESSAGE_MAGIC_CODE and (when checked) its CRC matches.
"""

from __future__ import annotations

import enum
import ipaddress
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from store.codec.message import (
    PROPERTY_DELAY,
    PROPERTY_TAGS,
    SCHEDULE_TOPIC,
    decode_properties,
    offset_msg_id,
    split_keys,
    tags_hash,
)

MESSAGE_MAGIC_CODE = 0xDAA320A7
BLANK_MAGIC_CODE = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 4 + 4
FIXED_PART_BYTES = 91  # every field but the variable body, topic and properties bytes (IPv4 hosts)
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
HOSTS_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
# MessageSysFlag: the transaction type is bits 2-3 of the sys flag.
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
V6_EXTRA_BYTES = 12  # a 20-byte IPv6 host field in place of an 8-byte IPv4 one

# Fields 1..14 and the body length, in one struct so a put writes them in one call.
HEADER = struct.Struct(">iIiiiqqiq8sq8siqi")
HEADER_BYTES = HEADER.size  # 88
assert HEADER_BYTES == 88
# The same for each combination of host forms, indexed by (sys_flag & HOSTS_V6_FLAGS) >> 4.
HEADERS = tuple(struct.Struct(f">iIiiiqqiq{b}sq{s}siqi") for s in (8, 20) for b in (8, 20))
assert HEADERS[0].format == HEADER.format and HEADERS[3].size == HEADER_BYTES + 2 * V6_EXTRA_BYTES
TOTAL_AND_MAGIC = struct.Struct(">iI")
TOPIC_LENGTH = struct.Struct(">B")
PROPERTIES_LENGTH = struct.Struct(">h")

# Byte positions used by readers that need one field without decoding the rest.
POS_TOTAL_SIZE = 0
POS_MAGIC = 4
POS_BODY_CRC = 8
POS_QUEUE_ID = 12
POS_QUEUE_OFFSET = 20
POS_PHYSICAL_OFFSET = 28
POS_SYS_FLAG = 36
POS_BORN_HOST = 48
# The positions below are those of IPv4 hosts; `hosts_extra` gives the shift for others.
POS_STORE_TIMESTAMP = 56
POS_RECONSUME_TIMES = 72
POS_BODY_LENGTH = 84
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


def body_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def message_length(body_length: int, topic_length: int, properties_length: int, sys_flag: int = 0) -> int:
    return FIXED_PART_BYTES + hosts_extra(sys_flag) + body_length + topic_length + properties_length


def enters_consume_queue(sys_flag: int) -> bool:
    """False for a prepared or rolled-back transaction message (CommitLogDispatcherBuildConsumeQueue)."""
    return sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


def born_host_extra(sys_flag: int) -> int:
    """Bytes every field after BORNHOST moves by: 12 for an IPv6 born host."""
    return V6_EXTRA_BYTES if sys_flag & BORNHOST_V6_FLAG else 0


def hosts_extra(sys_flag: int) -> int:
    """Bytes every field after STOREHOST moves by: 12 for each IPv6 host."""
    return V6_EXTRA_BYTES * (((sys_flag >> 4) & 1) + ((sys_flag >> 5) & 1))


def header_of(sys_flag: int) -> struct.Struct:
    """The struct of fields 1..14 and the body length for the host forms `sys_flag` names."""
    return HEADERS[(sys_flag & HOSTS_V6_FLAGS) >> 4]


def header_bytes(buf: Any, pos: int) -> int:
    """Where the body starts, relative to the message at `pos` (88 with IPv4 hosts)."""
    return HEADER_BYTES + hosts_extra(_INT.unpack_from(buf, pos + POS_SYS_FLAG)[0])


def store_timestamp_at(buf: Any, pos: int) -> int:
    """STORETIMESTAMP of the message at `pos`, for either born-host form."""
    extra = born_host_extra(_INT.unpack_from(buf, pos + POS_SYS_FLAG)[0])
    return int(_LONG.unpack_from(buf, pos + POS_STORE_TIMESTAMP + extra)[0])


def reconsume_times_at(buf: Any, pos: int) -> int:
    """RECONSUMETIMES of the message at `pos`, for either host form."""
    extra = hosts_extra(_INT.unpack_from(buf, pos + POS_SYS_FLAG)[0])
    return int(_INT.unpack_from(buf, pos + POS_RECONSUME_TIMES + extra)[0])


def body_length_at(buf: Any, pos: int) -> int:
    """BODY's length of the message at `pos`, for either host form."""
    extra = hosts_extra(_INT.unpack_from(buf, pos + POS_SYS_FLAG)[0])
    return int(_INT.unpack_from(buf, pos + POS_BODY_LENGTH + extra)[0])


class DecodeOutcome(enum.Enum):
    """Result of checking the bytes at a position (RocketMQ's checkMessageAndReturnSize)."""

    MESSAGE = "MESSAGE"
    BLANK = "BLANK"  # end-of-file marker: continue in the next file
    END = "END"  # zero bytes: nothing more was written here
    CORRUPT = "CORRUPT"  # bad magic, bad length or bad CRC


@dataclass(slots=True)
class DispatchRequest:
    """What the reput service hands to dispatchers for one stored message."""

    topic: str
    queue_id: int
    commitlog_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str
    uniq_key: str
    sys_flag: int
    properties: dict[str, str]


@dataclass(slots=True)
class CheckResult:
    outcome: DecodeOutcome
    size: int  # bytes to advance by (message size, blank size), 0 for END/CORRUPT
    reason: str = ""
    request: DispatchRequest | None = None


def check_message(
    buf: Any,
    pos: int,
    limit: int,
    check_crc: bool = True,
    decode: bool = True,
    delay_levels_ms: list[int] | None = None,
) -> CheckResult:
    """Check the message at `pos` of `buf` (valid bytes end at `limit`).

    With `decode`, the result carries the dispatch request of the message. With
    `delay_levels_ms`, a SCHEDULE_TOPIC_XXXX message gets its due time as tags code.
    """
    if limit - pos < 8:
        return CheckResult(DecodeOutcome.END, 0, "fewer than 8 bytes left")
    total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)
    if total == 0 and magic == 0:
        return CheckResult(DecodeOutcome.END, 0)
    if magic == BLANK_MAGIC_CODE:
        if total < END_FILE_MIN_BLANK_LENGTH or pos + total > limit:
            return CheckResult(DecodeOutcome.CORRUPT, 0, f"blank marker of bad length {total}")
        return CheckResult(DecodeOutcome.BLANK, total)
    if magic != MESSAGE_MAGIC_CODE:
        return CheckResult(DecodeOutcome.CORRUPT, 0, f"bad magic code {magic:#x} at {pos}")
    if total < FIXED_PART_BYTES or pos + total > limit:
        return CheckResult(DecodeOutcome.CORRUPT, 0, f"bad total size {total} at {pos}")
    fields = HEADER.unpack_from(buf, pos)
    extra = 0
    if fields[7] & HOSTS_V6_FLAGS:
        extra = hosts_extra(fields[7])
        if total < FIXED_PART_BYTES + extra:
            return CheckResult(DecodeOutcome.CORRUPT, 0, f"bad total size {total} at {pos}")
        fields = header_of(fields[7]).unpack_from(buf, pos)
    (_, _, crc, queue_id, _flag, queue_offset, phys, sys_flag, _bts, _bh, store_ts, _sh, _rc, _pto, body_len) = fields
    body_start = pos + HEADER_BYTES + extra
    if body_len < 0 or body_start + body_len + 3 > pos + total:
        return CheckResult(DecodeOutcome.CORRUPT, 0, f"bad body length {body_len} at {pos}")
    topic_len = buf[body_start + body_len]
    props_pos = body_start + body_len + 1 + topic_len
    if props_pos + 2 > pos + total:
        return CheckResult(DecodeOutcome.CORRUPT, 0, f"bad topic length at {pos}")
    (props_len,) = PROPERTIES_LENGTH.unpack_from(buf, props_pos)
    if props_len < 0 or message_length(body_len, topic_len, props_len, sys_flag) != total:
        return CheckResult(DecodeOutcome.CORRUPT, 0, f"total size {total} disagrees with its parts at {pos}")
    if check_crc and body_crc(memoryview(buf)[body_start : body_start + body_len]) != crc:
        return CheckResult(DecodeOutcome.CORRUPT, 0, f"body CRC mismatch at {pos}")
    if not decode:
        return CheckResult(DecodeOutcome.MESSAGE, total)
    topic = bytes(buf[body_start + body_len + 1 : props_pos]).decode("utf-8", errors="replace")
    props = decode_properties(buf[props_pos + 2 : props_pos + 2 + props_len])
    tags_code = tags_hash(props.get(PROPERTY_TAGS, ""))
    if delay_levels_ms is not None and topic == SCHEDULE_TOPIC and PROPERTY_DELAY in props:
        # Delay messages carry their due time as the tags code (ScheduleMessageService).
        tags_code = delay_due_time_ms(props, store_ts, delay_levels_ms)
    request = DispatchRequest(
        topic=topic,
        queue_id=queue_id,
        commitlog_offset=phys,
        msg_size=total,
        tags_code=tags_code,
        store_timestamp=store_ts,
        consume_queue_offset=queue_offset,
        keys=props.get("KEYS", ""),
        uniq_key=props.get("UNIQ_KEY", ""),
        sys_flag=sys_flag,
        properties=props,
    )
    return CheckResult(DecodeOutcome.MESSAGE, total, request=request)


def delay_due_time_ms(props: dict[str, str], store_ts: int, delay_levels_ms: list[int]) -> int:
    """Due time of a delayed message: its store time plus its level's delay (capped at the top level)."""
    try:
        level = int(props.get(PROPERTY_DELAY, "0"))
    except ValueError:
        level = 0
    if level <= 0:
        return store_ts
    level = min(level, len(delay_levels_ms))
    return store_ts + delay_levels_ms[level - 1]


_TOPIC_NAMES: dict[bytes, str] = {}  # topic bytes -> name; topics repeat, decoding them need not
_MAX_TOPIC_NAMES = 65_536
DISPATCH_BLANK = -1
DISPATCH_END = 0


def decode_for_dispatch(buf: Any, pos: int, limit: int, delay_levels_ms: list[int] | None) -> tuple[int, DispatchRequest | None]:
    """The dispatch thread's decoder: (size, request) for a message, (DISPATCH_BLANK, None)
    for an end-of-file marker, (DISPATCH_END, None) where nothing (whole) is written yet.

    The same checks as check_message without the CRC (the bytes were checked when written
    or at recovery), with fewer objects per message: dispatch runs once per message and
    shares the interpreter with the producers.
    """
    if limit - pos < 8:
        return DISPATCH_END, None
    total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        if magic == BLANK_MAGIC_CODE and total >= END_FILE_MIN_BLANK_LENGTH and pos + total <= limit:
            return DISPATCH_BLANK, None
        return DISPATCH_END, None
    if total < FIXED_PART_BYTES or pos + total > limit:
        return DISPATCH_END, None
    fields = HEADER.unpack_from(buf, pos)
    extra = 0
    if fields[7] & HOSTS_V6_FLAGS:
        extra = hosts_extra(fields[7])
        if total < FIXED_PART_BYTES + extra:
            return DISPATCH_END, None
        fields = header_of(fields[7]).unpack_from(buf, pos)
    (_, _, _, queue_id, _, queue_offset, phys, sys_flag, _, _, store_ts, _, _, _, body_len) = fields
    topic_pos = pos + HEADER_BYTES + extra + body_len
    if body_len < 0 or topic_pos + 3 > pos + total:
        return DISPATCH_END, None
    topic_len = buf[topic_pos]
    props_pos = topic_pos + 1 + topic_len
    if props_pos + 2 > pos + total:
        return DISPATCH_END, None
    (props_len,) = PROPERTIES_LENGTH.unpack_from(buf, props_pos)
    if props_len < 0 or FIXED_PART_BYTES + extra + body_len + topic_len + props_len != total:
        return DISPATCH_END, None
    raw_topic = bytes(buf[topic_pos + 1 : props_pos])
    topic = _TOPIC_NAMES.get(raw_topic)
    if topic is None:
        topic = raw_topic.decode("utf-8", errors="replace")
        if len(_TOPIC_NAMES) < _MAX_TOPIC_NAMES:
            _TOPIC_NAMES[raw_topic] = topic
    if props_len:
        props = decode_properties(buf[props_pos + 2 : props_pos + 2 + props_len])
        tags_code = tags_hash(props.get(PROPERTY_TAGS, ""))
        if delay_levels_ms is not None and topic == SCHEDULE_TOPIC and PROPERTY_DELAY in props:
            tags_code = delay_due_time_ms(props, store_ts, delay_levels_ms)
        keys = props.get("KEYS", "")
        uniq_key = props.get("UNIQ_KEY", "")
    else:
        props, tags_code, keys, uniq_key = {}, 0, "", ""
    return total, DispatchRequest(topic, queue_id, phys, total, tags_code, store_ts, queue_offset, keys, uniq_key, sys_flag, props)


def decode_message(buf: Any, pos: int, store_host: bytes | None = None, hosts: bool = True) -> dict[str, Any]:
    """Decode the message at `pos` into a dict (no CRC check: callers read checked bytes). With `hosts`
    False its `born_host` and `store_host` are None: a reader that shows neither (the HTTP views of pulls
    and receives) does not pay for formatting them, a fifth of a decode."""
    (
        total,
        _magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host_raw,
        reconsume,
        pto,
        body_len,
    ) = header_of(_INT.unpack_from(buf, pos + POS_SYS_FLAG)[0]).unpack_from(buf, pos)
    body_start = pos + HEADER_BYTES + hosts_extra(sys_flag)
    body = bytes(buf[body_start : body_start + body_len])
    topic_len = buf[body_start + body_len]
    topic_start = body_start + body_len + 1
    topic = bytes(buf[topic_start : topic_start + topic_len]).decode("utf-8", errors="replace")
    props_pos = topic_start + topic_len
    (props_len,) = PROPERTIES_LENGTH.unpack_from(buf, props_pos)
    props = decode_properties(buf[props_pos + 2 : props_pos + 2 + props_len])
    host = store_host if store_host is not None else bytes(store_host_raw)
    offset_id = offset_msg_id(host, phys)
    return {
        "topic": topic,
        "queue_id": queue_id,
        "queue_offset": queue_offset,
        "commitlog_offset": phys,
        "store_size": total,
        "body_crc": crc,
        "flag": flag,
        "sys_flag": sys_flag,
        "born_timestamp": born_ts,
        "born_host": _host_text(bytes(born_host)) if hosts else None,
        "store_timestamp": store_ts,
        "store_host": _host_text(bytes(store_host_raw)) if hosts else None,
        "reconsume_times": reconsume,
        "prepared_transaction_offset": pto,
        "body": body,
        "properties": props,
        "tags": props.get("TAGS"),
        "keys": split_keys(props.get("KEYS", "")),
        "msg_id": props.get("UNIQ_KEY") or offset_id,
        "offset_msg_id": offset_id,
    }


def _host_text(raw: bytes) -> str:
    """`a.b.c.d:port` for an 8-byte host, `[v6 address]:port` for a 20-byte one."""
    port = int.from_bytes(raw[-4:], "big")
    if len(raw) == 20:
        return f"[{ipaddress.IPv6Address(raw[:16]).compressed}]:{port}"
    return ".".join(str(b) for b in raw[:4]) + f":{port}"


def encode_message(
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00",
    store_timestamp: int = 0,
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> bytes:
    """Encode one message as bytes (tests and tools; the put path writes in place).

    The v6 bits of `sys_flag` are set from the hosts' lengths (`with_host_flags`).
    """
    sys_flag = with_host_flags(sys_flag, born_host, store_host)
    total = message_length(len(body), len(topic), len(properties), sys_flag)
    out = bytearray(total)
    write_message_into(
        out, 0, total, topic, body, properties, body_crc(body), queue_id, queue_offset, physical_offset,
        flag, sys_flag, born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
        prepared_transaction_offset,
    )  # fmt: skip
    return bytes(out)


def write_message_into(
    buf: Any,
    pos: int,
    total: int,
    topic: bytes,
    body: bytes,
    properties: bytes,
    crc: int,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
) -> None:
    """Write one message at `pos` of `buf`; the caller has checked it fits.

    The v6 bits of `sys_flag` are set from the hosts' lengths (`with_host_flags`).
    """
    body_len = len(body)
    sys_flag = with_host_flags(sys_flag, born_host, store_host)
    header_of(sys_flag).pack_into(
        buf, pos, total, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
        born_timestamp, born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset,
        body_len,
    )  # fmt: skip
    p = pos + HEADER_BYTES + hosts_extra(sys_flag)
    buf[p : p + body_len] = body
    p += body_len
    topic_len = len(topic)
    buf[p] = topic_len
    p += 1
    buf[p : p + topic_len] = topic
    p += topic_len
    PROPERTIES_LENGTH.pack_into(buf, p, len(properties))
    p += 2
    buf[p : p + len(properties)] = properties


def with_host_flags(sys_flag: int, born_host: bytes, store_host: bytes) -> int:
    """`sys_flag` with its v6 bits saying what the hosts are, as the put path sets them from the
    addresses (CommitLog.asyncPutMessage); ValueError for a host of neither 8 nor 20 bytes."""
    if len(born_host) not in (8, 20) or len(store_host) not in (8, 20):
        raise ValueError("a host is 8 bytes (IPv4 and port) or 20 (IPv6 and port)")
    born = BORNHOST_V6_FLAG if len(born_host) == 20 else 0
    return (sys_flag & ~HOSTS_V6_FLAGS) | born | (STOREHOSTADDRESS_V6_FLAG if len(store_host) == 20 else 0)


def write_blank_into(buf: Any, pos: int, size: int) -> None:
    TOTAL_AND_MAGIC.pack_into(buf, pos, size, BLANK_MAGIC_CODE)


def read_int(buf: Any, pos: int) -> int:
    value: int = _INT.unpack_from(buf, pos)[0]
    return value


def read_long(buf: Any, pos: int) -> int:
    value: int = _LONG.unpack_from(buf, pos)[0]
    return value


def iter_messages(buf: Any, start: int = 0, limit: int | None = None) -> Any:
    """Yield (position, size) of each message in a buffer of concatenated stored messages."""
    end = len(buf) if limit is None else limit
    pos = start
    while pos + 8 <= end:
        total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)
        if magic != MESSAGE_MAGIC_CODE or total < FIXED_PART_BYTES or pos + total > end:
            return
        yield pos, total
        pos += total
