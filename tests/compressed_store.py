"""A store holding messages whose SYSFLAG has RocketMQ's COMPRESSED_FLAG, as RocketMQ producers
write bodies over 4 KiB: zlib bodies that inflate, and ones that cannot be inflated."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from store import DefaultMessageStore, MessageInner, MessageStoreConfig, new_uniq_key
from tests.waiting import wait_for

TOPIC = "zipped"
LIMIT_BYTES = 65_536  # max_message_size_bytes of the store (tests/app/conftest.py SMALL_STORE)
LZ4_TYPE = 0x1 << 8  # MessageSysFlag.COMPRESSION_LZ4_TYPE
ZLIB_TYPE = 0x3 << 8  # MessageSysFlag.COMPRESSION_ZLIB_TYPE
TEXT = ("order paid " * 1_000).encode()
BINARY = bytes(range(256)) * 40
# About 8 KiB stored, 8 MiB inflated: past the broker's limit and the Python client's (4 MiB).
BOMB = zlib.compress(b"\0" * (8 << 20), 9)
LIMIT_EXACTLY = b"y" * LIMIT_BYTES


@dataclass(frozen=True)
class Case:
    """One stored message: its stored body and SYSFLAG, and what a reader should see."""

    key: str
    stored: bytes
    sys_flag: int
    body: bytes  # what a view shows: the inflated body, or the stored bytes when it cannot be inflated
    error: str | None


CASES = [
    Case("plain", b"not compressed", 0, b"not compressed", None),
    Case("text", zlib.compress(TEXT), 0x1, TEXT, None),
    Case("binary", zlib.compress(BINARY), 0x1, BINARY, None),
    Case("typed-zlib", zlib.compress(TEXT), 0x1 | ZLIB_TYPE, TEXT, None),
    Case("at-limit", zlib.compress(LIMIT_EXACTLY), 0x1, LIMIT_EXACTLY, None),
    Case("corrupt", b"\x78\x9cnot a zlib stream", 0x1, b"\x78\x9cnot a zlib stream", "BODY_CORRUPT"),
    Case("truncated", zlib.compress(TEXT)[:-6], 0x1, zlib.compress(TEXT)[:-6], "BODY_CORRUPT"),
    Case("bomb", BOMB, 0x1, BOMB, "BODY_TOO_LARGE"),
    Case("lz4", b"\x04\x22\x4d\x18lz4 frame", 0x1 | LZ4_TYPE, b"\x04\x22\x4d\x18lz4 frame", "BODY_COMPRESSION_UNSUPPORTED"),
]


def store_config(root: str) -> MessageStoreConfig:
    """The store settings of tests/app/conftest.py's SMALL_STORE."""
    return MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log_bytes=262_144,
        mapped_file_size_consume_queue_bytes=20_000,
        max_message_size_bytes=LIMIT_BYTES,
        max_hash_slot_num=1_000,
        max_index_num=4_000,
    )


def write_compressed_store(root: str) -> None:
    """Put CASES to TOPIC queue 0 in order (queue offset = index), each with its case as KEYS, then shut down."""
    store = DefaultMessageStore(store_config(root))
    store.load()
    store.start()
    try:
        store.topic_config_manager.create_or_update(TOPIC, 1)
        for case in CASES:
            props = {"KEYS": case.key, "UNIQ_KEY": new_uniq_key()}
            result = store.put_message(MessageInner(TOPIC, case.stored, 0, props, sys_flag=case.sys_flag))
            assert result.ok, result
        wait_for(lambda: not store.reput_service.behind(), 10, what="dispatch to catch up")
    finally:
        store.shutdown()
