"""Delay-level lateness: how long after its due time a delayed message reaches its topic, under no load.

    .venv/bin/python bench/schedule_bench.py [--messages 300] [--spread-ms 3000] [--level 1s]

A store in a temporary directory gets `--messages` delayed puts spread evenly over
`--spread-ms` (one level, so due times are spread too). An arrival listener stamps each
message when dispatch makes it visible in its real topic; lateness = that instant - due time
(store time + level delay). Two baselines come from the same run: the configured scan
interval (the wait a level without exact wake-up would add) and the dispatch latency of
undelayed puts (put called -> visible). The target is a p99 lateness within 100 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from store import DefaultMessageStore, MessageStoreConfig, build_message  # noqa: E402

TARGET_MS = 100.0  # the bound on lateness under no load
DRAIN_TIMEOUT_S = 30.0  # longest wait for the last delayed message after its due time


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(messages: int, spread_ms: int, level_word: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tidemq-schedule-bench-") as root:
        config = MessageStoreConfig(store_path_root_dir=root, message_delay_level=level_word)
        level_ms = config.delay_levels_ms()[0]
        store = DefaultMessageStore(config)
        arrivals: dict[tuple[str, int, int], float] = {}  # (topic, queue id, queue offset) -> wall ms when visible
        ends: dict[tuple[str, int], int] = {}
        done = threading.Event()
        expected = messages * 2

        def on_arrival(topic: str, queue_id: int, after: int, *_codes: object) -> None:
            if topic in ("Delayed", "Direct"):
                now = time.time() * 1000
                for offset in range(ends.get((topic, queue_id), 0), after):
                    arrivals[(topic, queue_id, offset)] = now
                ends[(topic, queue_id)] = max(after, ends.get((topic, queue_id), 0))
                if len(arrivals) >= expected:
                    done.set()

        store.load()
        store.add_message_arriving_listener(on_arrival)
        store.start()
        try:
            while not store.is_running():
                time.sleep(0.01)
            due: dict[str, float] = {}  # UNIQ_KEY -> due wall ms
            put_called: dict[tuple[str, int, int], float] = {}
            gap_s = spread_ms / 1000 / messages
            for i in range(messages):
                delayed = build_message("Delayed", b"d" * 128, i % 4, delay_level=1)
                r = store.put_message(delayed)
                assert r.ok, r
                due[delayed.properties["UNIQ_KEY"]] = r.items[0].store_timestamp + level_ms
                called = time.time() * 1000
                r = store.put_message(build_message("Direct", b"d" * 128, i % 4))
                assert r.ok, r
                put_called[("Direct", i % 4, r.items[0].logics_offset)] = called
                time.sleep(gap_s)
            if not done.wait(level_ms / 1000 + DRAIN_TIMEOUT_S):
                raise SystemExit(f"only {len(arrivals)} of {expected} messages arrived")
            delivered = delivered_offsets(store, "Delayed")
        finally:
            store.shutdown()
        lateness = [arrivals[delivered[k]] - t for k, t in due.items()]
        dispatch = [arrivals[k] - t for k, t in put_called.items()]
        return {
            "scan_interval_ms": float(config.schedule_scan_interval_ms),
            "dispatch_p50_ms": statistics.median(dispatch),
            "dispatch_p99_ms": percentile(dispatch, 99),
            "lateness_p50_ms": statistics.median(lateness),
            "lateness_p99_ms": percentile(lateness, 99),
            "lateness_max_ms": max(lateness),
            "lateness_min_ms": min(lateness),
        }


def delivered_offsets(store: DefaultMessageStore, topic: str) -> dict[str, tuple[str, int, int]]:
    """UNIQ_KEY -> (topic, queue id, queue offset) of every message in the topic's queues."""
    out: dict[str, tuple[str, int, int]] = {}
    for queue_id in store.queue_ids_of(topic):
        offset = 0
        while True:
            with store.get_message("bench", topic, queue_id, offset, 32) as r:
                if not r.message_count:
                    break
                for queue_offset, msg in zip(r.queue_offsets, r.decode(), strict=True):
                    out[msg["properties"]["UNIQ_KEY"]] = (topic, queue_id, queue_offset)
                offset = r.next_begin_offset
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300, help="delayed messages (and as many undelayed ones)")
    parser.add_argument("--spread-ms", type=int, default=3_000, help="the puts are spread over this long")
    parser.add_argument("--level", default="1s", help="the one delay level used, e.g. 1s")
    args = parser.parse_args()
    r = run(args.messages, args.spread_ms, args.level)
    scan = r["scan_interval_ms"]
    print(f"delayed messages: {args.messages}, level {args.level}, spread over {args.spread_ms} ms")
    print(f"baseline: scan interval {scan:.0f} ms; undelayed dispatch p50 {r['dispatch_p50_ms']:.2f} ms, p99 {r['dispatch_p99_ms']:.2f} ms")
    for name in ("p50", "p99", "max"):
        value = r[f"lateness_{name}_ms"]
        print(
            f"lateness {name}: {value:7.2f} ms = {value / scan:5.3f} x scan interval"
            f" = {value / max(r['dispatch_p50_ms'], 0.001):6.1f} x undelayed dispatch p50"
        )
    print(f"lateness min: {r['lateness_min_ms']:.2f} ms (negative would mean early delivery)")
    verdict = "within" if r["lateness_p99_ms"] <= TARGET_MS and r["lateness_min_ms"] >= 0 else "NOT within"
    print(f"p99 lateness {verdict} the {TARGET_MS:.0f} ms target")


if __name__ == "__main__":
    main()
