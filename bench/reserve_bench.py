"""Put throughput with blocks reserved ahead of the writes (reserve_ahead_bytes, the default) against
whole files reserved at their creation (reserve_ahead_bytes = 0, the former behaviour), same run.

Each side puts the same prebuilt 1 KiB messages, one put call each, into a new store of its own on
the same disk (commitlog files of 64 MiB, so both sides create and roll several files and the
reserve-ahead side reserves many steps), with dispatch and the flusher running. Reported per side:
puts per second, CPU per message (process CPU time over the timed puts, every thread), the blocks
the store allocated at the end, and the ratio of each figure to the whole-file baseline. Sides
alternate (whole, ahead, whole, ahead ...) and the best round of each is kept.

Usage: python bench/reserve_bench.py [--quick] [--messages N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from store import DefaultMessageStore, MessageStoreConfig, build_message

MIB = 1024 * 1024


def allocated_bytes(root: str) -> int:
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, files in os.walk(root) for f in files)


def one_side(ahead: int, messages: int) -> tuple[float, float, int]:
    """(puts per second, CPU microseconds per put, bytes allocated) of one store with `ahead`."""
    root = tempfile.mkdtemp(prefix="tidemq-reserve-bench-")
    try:
        config = MessageStoreConfig(
            store_path_root_dir=root,
            mapped_file_size_commit_log_bytes=64 * MIB,
            reserve_ahead_bytes=ahead,
            max_hash_slot_num=100_000,
            max_index_num=400_000,
        )
        store = DefaultMessageStore(config)
        store.load()
        store.start()
        try:
            body = b"x" * 1024
            msgs = [build_message("Bench", body, queue_id=i % 4) for i in range(messages)]
            wall0, cpu0 = time.perf_counter(), time.process_time()
            for msg in msgs:
                result = store.put_message(msg)
                assert result.items, result
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            used = allocated_bytes(root)
        finally:
            store.shutdown()
        return messages / wall, cpu * 1e6 / messages, used
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: few messages, one round")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    messages, rounds = (20_000, 1) if args.quick else (args.messages, args.rounds)
    best: dict[str, tuple[float, float, int]] = {}
    for _ in range(rounds):
        for name, ahead in (("whole files", 0), ("reserve ahead 64 MiB", 64 * MIB)):
            rate, cpu, used = one_side(ahead, messages)
            if name not in best or rate > best[name][0]:
                best[name] = (rate, cpu, used)
    base_rate, base_cpu, base_used = best["whole files"]
    print(f"{messages} puts of 1 KiB, commitlog files of 64 MiB, best of {rounds} round(s)")
    print(f"{'side':<22} {'puts/s':>10} {'ratio':>6} {'CPU us/put':>11} {'ratio':>6} {'allocated MB':>13}")
    for name, (rate, cpu, used) in best.items():
        print(f"{name:<22} {rate:>10.0f} {rate / base_rate:>6.2f} {cpu:>11.1f} {cpu / base_cpu:>6.2f} {used / 1e6:>13.1f}")
    del base_used


if __name__ == "__main__":
    main()
