"""Timer messages: memory with many pending, and delivery lateness at a high due rate.

    .venv/bin/python bench/timer_bench.py [--pending 1000000] [--rate 10000] [--seconds 5]

Each part runs in a process of its own over a store in a temporary directory (default settings:
timer_precision_ms 100, the RocketMQ-sized wheel), so its RSS is its own:

1. memory: `--pending` timer messages due 1 to 2 hours ahead are put in batches and enqueued into
   the wheel; the process's VmRSS (and its anonymous / file-backed parts) is read once all are
   in the wheel. Baseline from the same run: the same number of plain messages in another
   process. Target: RSS under 200 MB.
2. lateness: `--rate` x `--seconds` timer messages with due times spread evenly over `--seconds`
   (so `--rate` become due per second) are put ahead of time; each delivered copy's lateness is
   its store time in the real topic minus its TIMER_DELIVER_MS. Target: p99 <= 2 x precision.
The load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from store import DefaultMessageStore, MessageStoreConfig, TimerStatus, build_message, deliver_at  # noqa: E402

BATCH = 1_000  # messages per put
RSS_TARGET_MB = 200.0


def memory_mb() -> dict[str, float]:
    out: dict[str, float] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(line.split()[1]) / 1024
    return out


def open_store(root: str) -> DefaultMessageStore:
    store = DefaultMessageStore(MessageStoreConfig(store_path_root_dir=root))
    store.load()
    store.start()
    return store


def timer_status(store: DefaultMessageStore) -> TimerStatus:
    status = store.timer_status()
    assert status is not None  # the timer wheel is on in the default settings
    return status


def part_memory(pending: int, timers: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="tidemq-timer-bench-") as root:
        store = open_store(root)
        base = int(time.time() * 1000) + 3_600_000
        t0 = time.monotonic()
        for first in range(0, pending, BATCH):
            msgs = [build_message("T", b"x" * 64, i % 4) for i in range(first, min(pending, first + BATCH))]
            if timers:
                for i, m in enumerate(msgs):
                    deliver_at(m, base + ((first + i) * 3_600_000) // pending)
            result = store.put_messages(msgs)
            assert result.ok, result
        put_s = time.monotonic() - t0
        while timers and timer_status(store)["pending_in_wheel"] < pending:
            time.sleep(0.1)
        enqueue_s = time.monotonic() - t0
        mem = memory_mb()
        status = timer_status(store)
        store.shutdown()
    return {"pending": status["pending"] if timers else 0, "put_s": put_s, "all_in_wheel_s": enqueue_s, **mem}


def part_lateness(rate: int, seconds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="tidemq-timer-bench-") as root:
        store = open_store(root)
        n = rate * seconds
        lead_ms = 3_000 + n // 50  # time to put them all before the first is due
        start = int(time.time() * 1000) + lead_ms
        for first in range(0, n, BATCH):
            msgs = [
                deliver_at(build_message("T", b"x" * 64, i % 4), start + (i * 1000) // rate) for i in range(first, min(n, first + BATCH))
            ]
            assert store.put_messages(msgs).ok
        put_done = int(time.time() * 1000)
        deadline = time.monotonic() + lead_ms / 1000 + seconds + 30
        while sum(store.get_max_offset_in_queue("T", q) for q in range(4)) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        lateness: list[int] = []
        for q in range(4):
            cq = store.find_consume_queue("T", q)
            assert cq is not None
            for i in range(cq.get_max_offset_in_queue()):
                entry = cq.read_entry(i)
                assert entry is not None
                msg = store.look_message_by_offset(entry[0])
                assert msg is not None
                lateness.append(msg["store_timestamp"] - int(msg["properties"]["TIMER_DELIVER_MS"]))
        status = timer_status(store)
        store.shutdown()
    lateness.sort()
    return {
        "messages": n,
        "delivered": len(lateness),
        "put_ahead_ms": start - put_done,
        "p50_ms": lateness[len(lateness) // 2],
        "p99_ms": lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))],
        "max_ms": lateness[-1],
        "min_ms": lateness[0],
        "store_p99_bucket_ms": status["lateness"]["p99_ms"],
        "loadavg": os.getloadavg(),
    }


def in_child(part: str, *args: str) -> dict[str, float]:
    """The child's figures (JSON numbers) for `part`."""
    out = subprocess.run([sys.executable, __file__, "--child", part, *args], check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--child", nargs="+")
    args = parser.parse_args()
    if args.child:
        part, *rest = args.child
        result = part_memory(int(rest[0]), rest[1] == "1") if part == "memory" else part_lateness(int(rest[0]), int(rest[1]))
        print(json.dumps(result))
        return
    precision = MessageStoreConfig().timer_precision_ms
    print(f"load average before: {os.getloadavg()}")
    timers = in_child("memory", str(args.pending), "1")
    plain = in_child("memory", str(args.pending), "0")
    print(f"| {args.pending:,} messages | VmRSS | RssAnon | RssFile | put s | all in wheel s |")
    print("|---|---|---|---|---|---|")
    for name, r in (("timers pending", timers), ("plain (baseline)", plain)):
        print(
            f"| {name} | {r['VmRSS']:.0f} MB | {r['RssAnon']:.0f} MB | {r['RssFile']:.0f} MB | {r['put_s']:.1f} | {r['all_in_wheel_s']:.1f} |"
        )
    print(f"timers / plain VmRSS: {timers['VmRSS'] / plain['VmRSS']:.2f}x; target < {RSS_TARGET_MB:.0f} MB: "
          f"{'met' if timers['VmRSS'] < RSS_TARGET_MB else 'MISSED'} (pending {timers['pending']:,})")  # fmt: skip
    late = in_child("lateness", str(args.rate), str(args.seconds))
    print(
        f"lateness at {args.rate:,} due msg/s for {args.seconds} s ({late['delivered']:,}/{late['messages']:,} delivered): "
        f"p50 {late['p50_ms']} ms, p99 {late['p99_ms']} ms, max {late['max_ms']} ms, min {late['min_ms']} ms; "
        f"p99 / precision = {late['p99_ms'] / precision:.2f} (target <= 2); store histogram p99 bucket {late['store_p99_bucket_ms']} ms"
    )
    print(f"load average after: {late['loadavg']}")


if __name__ == "__main__":
    main()
