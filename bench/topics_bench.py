"""Many topics: creating 100,000 topics over HTTP at a steady rate, then listing and serving them.

A topic's creation is one state record (store/state/state_log.py) and an O(1) change of the in-memory
table; topics.json is written in the background. This starts a broker process on a temporary store,
creates `--topics` topics with `--clients` concurrent HTTP clients (keep-alive connections, one
PUT each), and reports the creation rate and the broker's CPU per creation in each tenth of the
run: the last tenth's rate against the first's is the figure (within 2x: a creation costs the
same with 100,000 topics as with none). Then the listing's time and a produce and pull on the
last topic.

Usage: python bench/topics_bench.py [--topics N] [--clients C]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.http_bench import Broker
from bench.load_generator import cpu_seconds

CONFIG = """
[broker]
max_json_body_bytes = 33554432
[store]
mapped_file_size_commit_log_bytes = 67108864
"""
WINDOWS = 10


def create_range(port: int, names: list[str], done: list[float]) -> None:
    """PUT each topic over one keep-alive connection; the time each answered goes to `done`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for name in names:
            conn.request("PUT", f"/v1/topics/{name}", body=b'{"queues":1}', headers={"content-type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status not in (200, 201):
                raise RuntimeError(f"PUT {name}: {response.status}")
            done.append(time.perf_counter())
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tidemq-topics-bench-", dir=os.environ.get("BENCH_DIR"))
    broker = Broker(root, CONFIG)
    try:
        names = [f"t{i:06d}" for i in range(args.topics)]
        per_window = args.topics // WINDOWS
        print(f"creating {args.topics:,} topics with {args.clients} clients (load average {os.getloadavg()[0]:.1f})")
        rows = []
        for w in range(WINDOWS):
            window = names[w * per_window : (w + 1) * per_window]
            done: list[float] = []
            cpu0, t0 = cpu_seconds(broker.proc.pid), time.perf_counter()
            threads = [
                threading.Thread(target=create_range, args=(broker.port, window[k :: args.clients], done)) for k in range(args.clients)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall, cpu = time.perf_counter() - t0, cpu_seconds(broker.proc.pid) - cpu0
            rows.append((len(window) / wall, cpu * 1e6 / len(window)))
            print(
                f"  topics {w * per_window:>7,} .. {(w + 1) * per_window:>7,}: {rows[-1][0]:>8,.0f} creates/s  {rows[-1][1]:>7.0f} µs broker CPU each"
            )
        first, last = rows[0], rows[-1]
        print(
            f"last tenth against the first: rate {last[0] / first[0]:.2f}x, CPU per create {last[1] / first[1]:.2f}x (target: rate >= 0.5x)"
        )
        t0 = time.perf_counter()
        status, body = broker.request("GET", "/v1/topics")
        print(f"listing {args.topics:,} topics: {status}, {len(body) / 1e6:.1f} MB in {time.perf_counter() - t0:.2f} s")
        last_topic = names[-1]
        status, _ = broker.request("POST", f"/v1/topics/{last_topic}/messages", b'{"body":"hello"}')
        pulled, body = broker.request("GET", f"/v1/topics/{last_topic}/queues/0/messages?offset=0")
        print(f"produce to {last_topic}: {status}; pull: {pulled}, {b'hello' in body}")
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
