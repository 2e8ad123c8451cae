"""Throughput of an operation called in a loop by several threads at once, for a fixed time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def calls_per_second(op: Callable[[int, int], object], threads: int, seconds: float) -> float:
    """Each of `threads` threads calls `op(thread_index, call_index)` until `seconds` have passed;
    the calls completed per second, all threads together (the last call of each may end late)."""
    counts = [0] * threads
    stop = threading.Event()

    def loop(k: int) -> None:
        i = 0
        while not stop.is_set():
            op(k, i)
            i += 1
        counts[k] = i

    workers = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    return sum(counts) / (time.perf_counter() - start)
