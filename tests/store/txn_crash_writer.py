"""A process that stops between a commit's two puts: python -m tests.store.txn_crash_writer STORE_DIR.

It stores two half messages, puts the committed copy of the first (the commit's first put)
and then kills itself with SIGKILL before the op record: what a crash at that moment leaves.
Prints `TXN <transaction id>` per half before the kill.
"""

from __future__ import annotations

import os
import signal
import sys

from store import DefaultMessageStore, PutBatch, build_message
from store.transaction.transaction_message import committed_message
from tests.store.conftest import small_config, wait_dispatched


def main() -> None:
    store = DefaultMessageStore(small_config(sys.argv[1]))
    store.load()
    store.start()
    ids = []
    for body in (b"committed-before-crash", b"still-pending"):
        result = store.put(PutBatch.of([build_message("TxnCrash", body, 1)], producer_group="pg")).result()
        ids.append(result.items[0].msg_id)
    first = store.look_message_by_offset(int(ids[0][16:], 16))  # the transaction id is the half's offset message id
    assert first is not None
    copy = committed_message(first, b"\x7f\x00\x00\x01\x00\x00\x00\x00")
    assert copy is not None and store.put_message(copy).ok
    wait_dispatched(store)
    for tid in ids:
        print("TXN", tid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
