"""Fill a store with many small files and leave it as a crash would (no shutdown), so the next start recovers it.

Run as `python -m tests.app.store_filler STORE_DIR MESSAGES`; the store settings are `FILLER_STORE`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from store import DefaultMessageStore, MessageStoreConfig, build_message
from tests.waiting import wait_for

# Small files (many of them to map and check) with room for 1,000-byte messages.
FILLER_STORE: dict[str, Any] = {
    "mapped_file_size_commit_log_bytes": 16384,
    "mapped_file_size_consume_queue_bytes": 20000,
    "max_message_size_bytes": 4096,
    "max_properties_size_bytes": 2048,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
}
TOPIC = "big"
QUEUES = 4
BATCH = 100


def main(store_dir: str, messages: int) -> None:
    store = DefaultMessageStore(MessageStoreConfig(store_path_root_dir=store_dir, **FILLER_STORE))
    store.load()
    store.start()
    store.topic_config_manager.create_or_update(TOPIC, QUEUES)
    body = b"x" * 1000
    for i in range(0, messages, BATCH):
        result = store.put_messages([build_message(TOPIC, body, (i // BATCH) % QUEUES) for _ in range(BATCH)])
        assert result.ok, result
    wait_for(lambda: not store.reput_service.behind(), 60, what="dispatch to catch up")
    os._exit(0)  # no shutdown: the abort file stays, so the next start runs the full recovery


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
