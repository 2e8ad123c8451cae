"""Replication benchmark (make bench-ha): put throughput and p99 latency with 64 concurrent producers.

Three runs in one process, each on fresh temporary stores: a master with no slave (the
baseline), an ASYNC_MASTER with a slave, and a SYNC_MASTER with a slave (every put waits
until the slave acknowledged it). The slave is a separate process. Figures are reported as
ratios to the no-slave baseline of the same run; the target is SYNC >= 0.5 x ASYNC.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ha import HASettings, attach
from store import DefaultMessageStore, MessageStoreConfig, build_message

TOPIC = "bench"


def config(root: str) -> MessageStoreConfig:
    return MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log_bytes=64 * 1024 * 1024)


def run_slave(root: str, master: str, ready: multiprocessing.synchronize.Event, stop: multiprocessing.synchronize.Event) -> None:
    settings = HASettings(role="slave", master_ha_address=master)
    store = DefaultMessageStore(settings.apply_to(config(root)))
    store.load()
    attach(store, settings)
    store.start()
    ready.set()
    stop.wait()
    store.shutdown()


def measure(replication: str | None, producers: int, seconds: float, body_bytes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = HASettings(role="master", ha_port=0, replication=replication or "async")
        store = DefaultMessageStore(settings.apply_to(config(os.path.join(tmp, "master"))))
        store.load()
        node = attach(store, settings)
        assert node is not None and node.service is not None
        store.start()
        slave = None
        stop = multiprocessing.Event()
        if replication is not None:
            ready = multiprocessing.Event()
            slave = multiprocessing.Process(target=run_slave, args=(os.path.join(tmp, "slave"), node.service.listen_address, ready, stop))
            slave.start()
            ready.wait(30)
            deadline = time.monotonic() + 30
            while node.status()["connection_state"] != "connected":
                assert time.monotonic() < deadline, "the slave did not connect"
                time.sleep(0.01)
        # After the slave connected: a SYNC_MASTER confirms the topic's state record only once a slave holds it.
        store.topic_config_manager.create_or_update(TOPIC, 8)
        body = b"x" * body_bytes
        latencies: list[list[float]] = [[] for _ in range(producers)]
        failures = [0]
        end_at = time.monotonic() + seconds

        def produce(index: int) -> None:
            mine = latencies[index]
            while time.monotonic() < end_at:
                t0 = time.perf_counter()
                result = store.put_message(build_message(TOPIC, body, index % 8))
                mine.append(time.perf_counter() - t0)
                if not result.ok:
                    failures[0] += 1

        threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        store.shutdown()
        stop.set()
        if slave is not None:
            slave.join(30)
        all_latencies = sorted(x for per in latencies for x in per)
        count = len(all_latencies)
        return {
            "puts_per_s": count / elapsed,
            "p99_ms": all_latencies[int(count * 0.99) - 1] * 1000 if count else float("nan"),
            "failures": failures[0],
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=64, help="concurrent producer threads")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each run")
    parser.add_argument("--body-bytes", type=int, default=256, help="message body size")
    args = parser.parse_args()
    results = {}
    for name, replication in (("no slave", None), ("ASYNC_MASTER", "async"), ("SYNC_MASTER", "sync")):
        results[name] = measure(replication, args.producers, args.seconds, args.body_bytes)
    base = results["no slave"]["puts_per_s"]
    print(f"{args.producers} producers, {args.body_bytes}-byte bodies, {args.seconds:.0f} s per run")
    print(f"{'mode':<14}{'puts/s':>10}{'x baseline':>12}{'p99 ms':>10}{'failures':>10}")
    for name, r in results.items():
        print(f"{name:<14}{r['puts_per_s']:>10.0f}{r['puts_per_s'] / base:>12.2f}{r['p99_ms']:>10.2f}{r['failures']:>10}")
    ratio = results["SYNC_MASTER"]["puts_per_s"] / results["ASYNC_MASTER"]["puts_per_s"]
    verdict = "meets" if ratio >= 0.5 else "misses"
    print(f"SYNC_MASTER / ASYNC_MASTER throughput: {ratio:.2f} ({verdict} the 0.5 target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
