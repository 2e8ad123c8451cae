"""A writer process for the crash test: puts under SYNC_FLUSH and prints each acknowledged message.

Usage: python -m tests.store.crash_writer STORE_DIR THREADS
Each line `ACK <uniq_key> <queue_id>` is printed only after put_message returned PUT_OK.
"""

from __future__ import annotations

import sys
import threading

from store import DefaultMessageStore, FlushDiskType, build_message
from tests.store.conftest import small_config


def main() -> None:
    root, threads = sys.argv[1], int(sys.argv[2])
    cfg = small_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, max_index_num=4096, max_hash_slot_num=512)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    out_lock = threading.Lock()
    print("READY", flush=True)

    def writer(n: int) -> None:
        i = 0
        while True:
            key = f"w{n}-{i}-{store.commit_log.get_max_offset()}"
            body = (key * 8).encode()[: 50 + (i * 37) % 900]
            r = store.put_message(build_message("Crash", body, queue_id=n % 3, keys=[key], uniq_key=key))
            if r.ok:
                with out_lock:
                    sys.stdout.write(f"ACK {key} {n % 3} {len(body)}\n")
                    sys.stdout.flush()
            i += 1

    for n in range(threads):
        threading.Thread(target=writer, args=(n,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
