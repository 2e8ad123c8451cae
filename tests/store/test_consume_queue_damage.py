"""Damaged consume-queue entries: a pull skips exactly the entries that point at no message and
serves every readable one after them (issue: a corrupt head made a consumer skip 1,490 messages)."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from store import DefaultMessageStore, GetMessageStatus, build_message
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE
from tests.store.conftest import open_store, small_config, wait_dispatched

TOPIC = "T"
COUNT = 300
DAMAGED = 10  # entries overwritten at the head of the queue's first file


def fill(root: str) -> list[int]:
    store = open_store(small_config(root, mapped_file_size_consume_queue_bytes=CQ_STORE_UNIT_SIZE * 1000))
    store.topic_config_manager.create_or_update(TOPIC, 1)
    offsets = []
    for i in range(COUNT):
        result = store.put_message(build_message(TOPIC, b"m%d" % i, 0))
        assert result.ok
        offsets.append(result.items[0].wrote_offset)
    wait_dispatched(store)
    store.shutdown()
    return offsets


def damage_head(root: str, entry_bytes: Callable[[int], bytes]) -> int:
    """Overwrite the first DAMAGED entries; how many of them are not gap entries (size > 0)."""
    path = os.path.join(root, "consumequeue", TOPIC, "0", f"{0:020d}")
    entries = [entry_bytes(i) for i in range(DAMAGED)]
    with open(path, "r+b") as f:
        f.write(b"".join(entries))
        f.flush()
        os.fsync(f.fileno())
    return sum(1 for e in entries if int.from_bytes(e[8:12], "big", signed=True) > 0)


def pull_every_offset(store: DefaultMessageStore) -> dict[int, bytes]:
    """Follow next_begin_offset from 0 like a consumer does; the queue offsets it was served."""
    served: dict[int, bytes] = {}
    offset = 0
    while offset < store.get_max_offset_in_queue(TOPIC, 0):
        with store.get_message("g", TOPIC, 0, offset, 32) as result:
            assert result.next_begin_offset > offset or result.status is GetMessageStatus.FOUND, result.status
            for queue_offset, message in zip(result.queue_offsets, result.decode(), strict=True):
                served[queue_offset] = message["body"]
            offset = result.next_begin_offset
    return served


RANDOM = random.Random(7)
DAMAGE = {
    "random bytes": lambda i: RANDOM.randbytes(CQ_STORE_UNIT_SIZE),
    "offsets past the log": lambda i: (2**40 + i).to_bytes(8, "big") + (100).to_bytes(4, "big") + bytes(8),
    "offsets inside messages": lambda i: (7 + i).to_bytes(8, "big") + (60).to_bytes(4, "big") + bytes(8),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_queue_head_skips_only_the_damaged_entries(tmp_path: Path, damage: str) -> None:
    root = str(tmp_path / "store")
    fill(root)
    pointing = damage_head(root, DAMAGE[damage])
    store = open_store(small_config(root, mapped_file_size_consume_queue_bytes=CQ_STORE_UNIT_SIZE * 1000))
    try:
        served = pull_every_offset(store)
        assert sorted(served) == list(range(DAMAGED, COUNT)), "a readable message was skipped"
        assert all(served[i] == b"m%d" % i for i in served)
        with store.get_message("g", TOPIC, 0, 0, 32) as first:  # the pull that meets the damage
            assert first.queue_offsets[0] == DAMAGED
        assert store.stats.damaged_queue_entries >= pointing > 0
        assert store.runtime_info()["damaged_queue_entries"] == store.stats.damaged_queue_entries
    finally:
        store.shutdown()
