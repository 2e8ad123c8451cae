"""A writer process for recovery tests: writes in phases, flushes the queues, index and
checkpoint at a chosen point, then waits to be killed.

Usage: python -m tests.store.phased_writer STORE_DIR PLAN
PLAN is comma-separated steps: `wN` writes N keyed messages (key `k<i>`, i counting from 0
across steps), `sS` sleeps S seconds, `f` runs one full flush of the consume queues, index and
checkpoint (FlushConsumeQueueService.do_flush, as its thread would; the thread itself is
given an interval too long to run on its own, so the checkpoint holds exactly that state).
Prints `ACK <offset> <queue_id> <queue_offset>` per message, then `DONE`, then waits.
"""

from __future__ import annotations

import sys
import threading
import time

from store import DefaultMessageStore, MessageStoreConfig, build_message
from tests.store.conftest import small_config, wait_dispatched

TOPIC = "P"


def config(root: str) -> MessageStoreConfig:
    return small_config(root, max_index_num=100_000, max_hash_slot_num=4096, flush_interval_consume_queue_ms=600_000)


def body_of(i: int) -> bytes:
    return f"body-{i:06d}-".encode() * 20


def main() -> None:
    root, plan = sys.argv[1], sys.argv[2]
    store = DefaultMessageStore(config(root))
    store.load()
    store.start()
    i = 0
    for step in plan.split(","):
        if step[0] == "w":
            for _ in range(int(step[1:])):
                r = store.put_message(build_message(TOPIC, body_of(i), queue_id=i % 2, keys=[f"k{i}"]))
                assert r.ok, r
                item = r.items[0]
                sys.stdout.write(f"ACK {item.wrote_offset} {item.queue_id} {item.logics_offset}\n")
                i += 1
            wait_dispatched(store)
        elif step[0] == "s":
            time.sleep(float(step[1:]))  # the plan's pause
        elif step == "f":
            assert store.flush_consume_queue_service is not None
            store.flush_consume_queue_service.do_flush(3)
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    threading.Event().wait()


if __name__ == "__main__":
    main()
