"""The commitlog's next file is ordered at the store's start, so the first roll after a start finds it made.

Real store on real files (64 KiB commitlog files); the wait for the allocate service's thread polls
with a deadline.
"""

from __future__ import annotations

import os

from store import DefaultMessageStore, GetMessageStatus, MessageStoreConfig, build_message
from store.logfile.mapped_file import offset_to_file_name
from tests.store.conftest import open_store
from tests.waiting import wait_for

DEADLINE_S = 20.0
TOPIC = "Roll"


def put(store: DefaultMessageStore, start: int, count: int) -> None:
    for i in range(start, start + count):
        assert store.put_message(build_message(TOPIC, f"k{i}:".encode().ljust(4000, b"."), 0)).ok


def bodies(store: DefaultMessageStore) -> list[str]:
    out: list[str] = []
    offset = 0
    while True:
        with store.get_message("check", TOPIC, 0, offset, 32) as r:
            if r.status is not GetMessageStatus.FOUND:
                return out
            out += [m["body"].split(b":")[0].decode() for m in r.decode()]
            offset = r.next_begin_offset


def test_the_first_commitlog_roll_after_a_start_takes_a_file_made_at_the_start(config: MessageStoreConfig) -> None:
    store = open_store(config)
    put(store, 0, 10)  # 64 KiB files: one file partly written
    store.shutdown()
    store = open_store(config)
    try:
        mfq = store.commit_log.mapped_file_queue
        (last,) = mfq.mapped_files
        following = os.path.join(mfq.store_path, offset_to_file_name(last.file_from_offset + config.mapped_file_size_commit_log_bytes))
        wait_for(lambda: os.path.exists(following), DEADLINE_S, what="the next commitlog file to be made at the start", poll_s=0.005)
        assert store.allocate_service.ready_on_request == 0
        put(store, 10, 10)  # rolls into the next file
        assert [mf.path for mf in mfq.mapped_files] == [last.path, following]
        assert store.allocate_service.ready_on_request == 1  # the roll found it made, not waited for its creation
        assert bodies(store) == [f"k{i}" for i in range(20)]
    finally:
        store.shutdown()
