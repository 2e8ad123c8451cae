"""In-process benchmark of consumer offset commits (store/metadata/consumer_offset_manager.py).

An offset commit is a state record in the commitlog (store/state/state_log.py): one put, answered under
the store's flush mode. This measures commits/s and process CPU per commit of
`DefaultMessageStore.commit_offsets` for ASYNC_FLUSH and SYNC_FLUSH stores, with one and with
several committing threads, each beside baselines from the same run on the same disk: a plain put
of a message of the record's size through the same store (what a commit costs at least: it is a
put), and raw os.write (+ fdatasync per record for SYNC) of the record's bytes.

Usage: python bench/offset_commit_bench.py [--seconds S] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.raw_append import raw_append_rate
from bench.threaded_rate import calls_per_second
from store import DefaultMessageStore, FlushDiskType, MessageStoreConfig, build_message

RECORD = b'{"c":[["BenchTopic@bench-group",3,123456]]}'


def store_of(directory: str, sync: bool) -> DefaultMessageStore:
    config = MessageStoreConfig(
        store_path_root_dir=directory, mapped_file_size_commit_log_bytes=64 * 1024 * 1024, mapped_file_size_consume_queue_bytes=600_000,
        max_hash_slot_num=50_000, max_index_num=200_000,
        flush_disk_type=FlushDiskType.SYNC_FLUSH if sync else FlushDiskType.ASYNC_FLUSH,
    )  # fmt: skip
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    return store


def measured(op: Callable[[int, int], object], threads: int, seconds: float) -> tuple[float, float]:
    """(calls per second, process CPU µs per call)."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    rate = calls_per_second(op, threads, seconds)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    calls = rate * wall
    return rate, cpu * 1e6 / max(1.0, calls)


def raw_writes(directory: str, seconds: float, sync: bool) -> tuple[float, float]:
    cpu0 = time.process_time()
    rate = raw_append_rate(os.path.join(directory, "raw.log"), RECORD, seconds, sync)
    return rate, (time.process_time() - cpu0) * 1e6 / max(1.0, rate * seconds)


def puts(directory: str, seconds: float, sync: bool, threads: int) -> tuple[float, float]:
    store = store_of(directory, sync)
    try:
        return measured(lambda k, i: store.put_message(build_message("BenchTopic", RECORD, k % 4)) and None, threads, seconds)
    finally:
        store.shutdown()


def commits(directory: str, seconds: float, sync: bool, threads: int) -> tuple[float, float]:
    store = store_of(directory, sync)
    try:
        return measured(lambda k, i: store.commit_offsets("bench-group", [("BenchTopic", k, i)]), threads, seconds)
    finally:
        store.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each measurement")
    parser.add_argument("--threads", type=int, default=8, help="committing threads of the concurrent runs")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tidemq-offset-bench-", dir=os.environ.get("BENCH_DIR"))
    n, s = args.threads, args.seconds
    try:
        rows: list[tuple[str, tuple[float, float], str]] = []
        for sync in (False, True):
            mode = "SYNC_FLUSH" if sync else "ASYNC_FLUSH"
            raw = ("raw os.write + fdatasync" if sync else "raw os.write") + " per record"
            runs = [
                (f"baseline {raw}", partial(raw_writes, seconds=s, sync=sync), ""),
                (f"baseline {mode} put of the record's size, 1 thread", partial(puts, seconds=s, sync=sync, threads=1), "put1"),
                (f"{mode} commit, 1 thread", partial(commits, seconds=s, sync=sync, threads=1), "put1"),
                (f"baseline {mode} put, {n} threads", partial(puts, seconds=s, sync=sync, threads=n), "putn"),
                (f"{mode} commit, {n} threads", partial(commits, seconds=s, sync=sync, threads=n), "putn"),
            ]
            for name, fn, _ in runs:
                directory = tempfile.mkdtemp(dir=root)
                rows.append((name, fn(directory), _))
                shutil.rmtree(directory, ignore_errors=True)
        print(f"offset commits ({s:g} s each, load average {os.getloadavg()[0]:.1f})")
        baselines: dict[str, float] = {}
        for name, (rate, cpu_us), key in rows:
            ratio = ""
            if name.startswith("baseline") and key:
                baselines[key + name.split()[1]] = cpu_us
            elif key:
                base = baselines.get(key + name.split()[0])
                ratio = f"  CPU {cpu_us / base:.2f}x the put's" if base else ""
            print(f"  {name:<52} {rate:>10,.0f}/s  {cpu_us:>7.1f} µs CPU each{ratio}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
