"""A writer process for the files-ahead crash test: puts until every log has a file made ahead, then waits to be killed.

Usage: python -m tests.store.ahead_crash_writer STORE_DIR
Puts to queues 0 and 1 of `Ahead` (key `k<i>` for message i, alternating queues) until both
consume queues and the index have their next file made and not taken, then prints
`READY <messages>` and waits.
"""

from __future__ import annotations

import sys
import threading
import time

from store import DefaultMessageStore, build_message
from store.logfile.file_ahead import AheadStatus
from tests.store.conftest import small_config

TOPIC = "Ahead"
DEADLINE_S = 60.0


def body_of(i: int) -> bytes:
    return f"k{i}:".encode().ljust(100 + i % 50, b".")


def main() -> None:
    store = DefaultMessageStore(small_config(sys.argv[1]))
    store.load()
    store.start()
    deadline = time.monotonic() + DEADLINE_S
    i = 0

    def all_made() -> bool:
        queues = [store.find_consume_queue(TOPIC, q) for q in (0, 1)]
        aheads = [cq.ahead for cq in queues if cq is not None] + [store.index_service.ahead]
        return len(aheads) == 3 and all(a.status is AheadStatus.READY for a in aheads)

    while not all_made():
        assert time.monotonic() < deadline, "the files ahead were never all made"
        assert store.put_message(build_message(TOPIC, body_of(i), i % 2, keys=[f"k{i}"])).ok
        i += 1
        time.sleep(0.001)  # gives the allocate service's thread its turn
    print(f"READY {i}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
