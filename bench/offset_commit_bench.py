"""In-process benchmark of consumer offset commits (store/consumer_offset_manager.py).

Measures commits/s of ConsumerOffsetManager.commit_offset for ASYNC_FLUSH stores (one
os.write per commit) and SYNC_FLUSH stores (os.write + a shared fdatasync), with one
and with several committing threads, each beside a baseline from the same run on the
same disk: the same record bytes written with raw os.write, and raw os.write +
os.fdatasync per record, one thread.

Usage: python bench/offset_commit_bench.py [--seconds S] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.raw_append import raw_append_rate
from bench.threaded_rate import calls_per_second
from store.consumer_offset_log import encode_record
from store.consumer_offset_manager import ConsumerOffsetManager


def raw_writes(directory: str, seconds: float, sync: bool) -> float:
    record = encode_record({"c": [["BenchTopic@bench-group", 3, 123456]]})
    return raw_append_rate(os.path.join(directory, "raw.log"), record, seconds, sync)


def commits(directory: str, seconds: float, sync: bool, threads: int) -> float:
    manager = ConsumerOffsetManager(directory, sync=sync)
    manager.load()
    rate = calls_per_second(lambda k, i: manager.commit_offset("bench-group", "BenchTopic", k, i), threads, seconds)
    manager.persist()
    manager.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each measurement")
    parser.add_argument("--threads", type=int, default=8, help="committing threads of the concurrent runs")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tidemq-offset-bench-", dir=os.environ.get("BENCH_DIR"))
    try:
        rows: list[tuple[str, float]] = []
        for name, fn in [
            ("baseline raw os.write per record", lambda d: raw_writes(d, args.seconds, False)),
            ("ASYNC_FLUSH commit, 1 thread", lambda d: commits(d, args.seconds, False, 1)),
            (f"ASYNC_FLUSH commit, {args.threads} threads", lambda d: commits(d, args.seconds, False, args.threads)),
            ("baseline raw os.write + fdatasync per record", lambda d: raw_writes(d, args.seconds, True)),
            ("SYNC_FLUSH commit, 1 thread", lambda d: commits(d, args.seconds, True, 1)),
            (f"SYNC_FLUSH commit, {args.threads} threads", lambda d: commits(d, args.seconds, True, args.threads)),
        ]:
            directory = tempfile.mkdtemp(dir=root)
            rows.append((name, fn(directory)))
        print(f"offset commits/s ({args.seconds:g} s each, directory {root})")
        for name, rate in rows:
            print(f"  {name:<48} {rate:>12,.0f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
