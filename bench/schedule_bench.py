"""Delay-level lateness: how long after its due time a delayed message reaches its topic, under no load.

    .venv/bin/python bench/schedule_bench.py [--messages 300] [--spread-ms 3000] [--level 1s]

A store in a temporary directory gets `--messages` delayed puts spread evenly over
`--spread-ms` (one level, so due times are spread too). An arrival listener stamps each
message when dispatch makes it visible in its real topic; lateness = that instant - due time
(store time + level delay). Two baselines come from the same run: the configured scan
interval (the wait a level without exact wake-up would add) and the dispatch latency of
undelayed puts (put returned -> visible). The target is a p99 lateness within 100 ms.
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
        arrivals: dict[str, float] = {}  # UNIQ_KEY -> wall ms when visible
        done = threading.Event()
        expected = messages * 2

        def on_arrival(topic: str, queue_id: int, after: int, tags_code: int, store_ts: int, props: dict[str, str]) -> None:
            if topic in ("Delayed", "Direct"):
                arrivals[props["UNIQ_KEY"]] = time.time() * 1000
                if len(arrivals) >= expected:
                    done.set()

        store.load()
        store.add_message_arriving_listener(on_arrival)
        store.start()
        try:
            while not store.is_running():
                time.sleep(0.01)
            due: dict[str, float] = {}
            put_done: dict[str, float] = {}
            gap_s = spread_ms / 1000 / messages
            for i in range(messages):
                delayed = build_message("Delayed", b"d" * 128, i % 4, delay_level=1)
                r = store.put_message(delayed)
                assert r.ok, r
                due[delayed.properties["UNIQ_KEY"]] = r.items[0].store_timestamp + level_ms
                direct = build_message("Direct", b"d" * 128, i % 4)
                assert store.put_message(direct).ok
                put_done[direct.properties["UNIQ_KEY"]] = time.time() * 1000
                time.sleep(gap_s)
            if not done.wait(level_ms / 1000 + DRAIN_TIMEOUT_S):
                raise SystemExit(f"only {len(arrivals)} of {expected} messages arrived")
        finally:
            store.shutdown()
        lateness = [arrivals[k] - t for k, t in due.items()]
        dispatch = [arrivals[k] - t for k, t in put_done.items()]
        return {
            "scan_interval_ms": float(config.schedule_scan_interval_ms),
            "dispatch_p50_ms": statistics.median(dispatch),
            "dispatch_p99_ms": percentile(dispatch, 99),
            "lateness_p50_ms": statistics.median(lateness),
            "lateness_p99_ms": percentile(lateness, 99),
            "lateness_max_ms": max(lateness),
            "lateness_min_ms": min(lateness),
        }


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
