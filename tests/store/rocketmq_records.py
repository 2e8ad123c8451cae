"""Stored messages built field by field from RocketMQ 4.x's published layout (docs/layouts.md),
without the codec the tests check: IPv4 hosts are 8 bytes, IPv6 ones 20 (SYSFLAG 0x10 for the
born host, 0x20 for the store host), and a commitlog file laid out from such records."""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field

MAGIC = 0xDAA320A7
BORN_V6 = 0x10
STORE_V6 = 0x20
PREPARED, COMMIT, ROLLBACK = 0x4, 0x8, 0xC

BORN_V4 = bytes([10, 1, 2, 3]) + (40123).to_bytes(4, "big")
BORN_V6_HOST = bytes.fromhex("20010db8000000000000000000000042") + (40124).to_bytes(4, "big")  # [2001:db8::42]:40124
STORE_V4 = bytes([10, 9, 9, 9]) + (10911).to_bytes(4, "big")
STORE_V6_HOST = bytes.fromhex("fd000000000000000000000000000009") + (10911).to_bytes(4, "big")  # [fd00::9]:10911


def props_bytes(props: dict[str, str]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


@dataclass
class Record:
    topic: str
    body: bytes
    props: dict[str, str] = field(default_factory=dict)
    queue_id: int = 0
    queue_offset: int = 0
    sys_flag: int = 0
    born_ts: int = 1_700_000_000_000
    store_ts: int = 1_700_000_000_001
    flag: int = 0

    @property
    def born_host(self) -> bytes:
        return BORN_V6_HOST if self.sys_flag & BORN_V6 else BORN_V4

    @property
    def store_host(self) -> bytes:
        return STORE_V6_HOST if self.sys_flag & STORE_V6 else STORE_V4

    def image(self, phys: int) -> bytes:
        """The 17 fields in order, each packed on its own."""
        topic, props = self.topic.encode(), props_bytes(self.props)
        fields = [
            struct.pack(">I", MAGIC),
            struct.pack(">i", zlib.crc32(self.body) & 0x7FFFFFFF),
            struct.pack(">i", self.queue_id),
            struct.pack(">i", self.flag),
            struct.pack(">q", self.queue_offset),
            struct.pack(">q", phys),
            struct.pack(">i", self.sys_flag),
            struct.pack(">q", self.born_ts),
            self.born_host,
            struct.pack(">q", self.store_ts),
            self.store_host,
            struct.pack(">i", 0),  # RECONSUMETIMES
            struct.pack(">q", 0),  # PREPARED TRANSACTION OFFSET
            struct.pack(">i", len(self.body)) + self.body,
            bytes([len(topic)]) + topic,
            struct.pack(">h", len(props)) + props,
        ]
        rest = b"".join(fields)
        return struct.pack(">i", 4 + len(rest)) + rest


def host_text(raw: bytes) -> str:
    """How decode_message shows a host: `a.b.c.d:port` or `[v6]:port`."""
    import ipaddress

    port = int.from_bytes(raw[-4:], "big")
    if len(raw) == 20:
        return f"[{ipaddress.IPv6Address(raw[:16])}]:{port}"
    return f"{ipaddress.IPv4Address(raw[:4])}:{port}"


def lay_out(records: list[Record]) -> tuple[bytes, list[int]]:
    """The records back to back from offset 0, and where each starts."""
    out, starts = bytearray(), []
    for r in records:
        starts.append(len(out))
        out += r.image(len(out))
    return bytes(out), starts


def write_commit_log(commit_log_dir: str, file_size: int, records: list[Record]) -> list[int]:
    """A first commitlog file holding the records (zeros after them); where each starts."""
    data, starts = lay_out(records)
    assert len(data) + 8 <= file_size
    os.makedirs(commit_log_dir, exist_ok=True)
    with open(os.path.join(commit_log_dir, f"{0:020d}"), "wb") as fh:
        fh.write(data + bytes(file_size - len(data)))
    return starts
