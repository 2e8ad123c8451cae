"""Held long polls at scale: N polls held on N queues, one message produced per queue.

One broker process; the client holds N pulls (`wait_ms` long) over raw asyncio connections, one
per queue of the topics it creates (at most `max_topic_queue_nums` queues per topic), then
produces one message per queue in sequence over one keep-alive connection and records, per
queue, the time from sending its produce to reading its poll's answer. Reported: polls answered
FOUND, wake-up p50/p99/max, the time one produce takes while N polls are held (p50/p99), and the
broker's RSS with every poll held. A wake-up or a produce whose cost grows with the number of
held polls shows up as a wake-up p99 and a produce time that grow with N.

Needs about N + 100 descriptors in this process and in the broker: the soft RLIMIT_NOFILE is
raised to the hard limit here (the broker raises its own); `ulimit -Hn` must be at least that.

Usage: python bench/held_polls_bench.py [--polls N] [--wait-ms MS]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.http_bench import Broker

QUEUES_PER_TOPIC = 1_000
CONFIG = """
[broker]
max_wait_ms = 300000
max_held_pulls = {held}
max_connections = {connections}
[store]
mapped_file_size_commit_log_bytes = 67108864
mapped_file_size_consume_queue_bytes = 6000
max_topic_queue_nums = {per_topic}
"""


def targets(polls: int) -> list[tuple[str, int]]:
    out = []
    for i in range(polls):
        out.append((f"held{i // QUEUES_PER_TOPIC}", i % QUEUES_PER_TOPIC))
    return out


async def hold(
    port: int, topic: str, queue: int, wait_ms: int, held: asyncio.Event, answered: dict[tuple[str, int], tuple[float, bytes]]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = f"GET /v1/topics/{topic}/queues/{queue}/messages?offset=0&wait_ms={wait_ms} HTTP/1.1\r\nhost: b\r\n\r\n"
    writer.write(request.encode())
    await writer.drain()
    held.set()
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length)
    answered[(topic, queue)] = (time.perf_counter(), body)
    writer.close()


async def produce_each(port: int, keys: list[tuple[str, int]], sent: dict[tuple[str, int], float], took: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for topic, queue in keys:
        body = b"x" * 128
        request = (
            f"POST /v1/topics/{topic}/messages?queue_id={queue} HTTP/1.1\r\nhost: b\r\n"
            f"content-type: application/octet-stream\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode() + body
        start = time.perf_counter()
        sent[(topic, queue)] = start
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
        took.append(time.perf_counter() - start)
        assert head.startswith(b"HTTP/1.1 201"), head[:80]
    writer.close()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def run(broker: Broker, polls: int, wait_ms: int) -> dict[str, float]:
    keys = targets(polls)
    answered: dict[tuple[str, int], tuple[float, bytes]] = {}
    events = [asyncio.Event() for _ in keys]
    tasks = [asyncio.create_task(hold(broker.port, t, q, wait_ms, e, answered)) for (t, q), e in zip(keys, events, strict=True)]
    for event in events:
        await event.wait()
    await asyncio.sleep(1.0)  # let the broker read every request and hold it
    rss_held = rss_mb(broker.proc.pid)
    sent: dict[tuple[str, int], float] = {}
    took: list[float] = []
    await produce_each(broker.port, keys, sent, took)
    await asyncio.wait(tasks, timeout=wait_ms / 1000 + 10)
    found = sum(1 for _, body in answered.values() if b'"FOUND"' in body)
    other = next((body for _, body in answered.values() if b'"FOUND"' not in body), None)
    if other is not None or len(answered) < polls:
        print(f"{polls - found} polls not answered FOUND; {polls - len(answered)} not answered; e.g. {other[:200] if other else None!r}")
    wakes = sorted(answered[k][0] - sent[k] for k in answered if k in sent and b'"FOUND"' in answered[k][1])
    took.sort()

    def pct(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, int(len(values) * p))] * 1000 if values else float("nan")

    return {
        "polls": polls,
        "found": found,
        "wake_p50_ms": pct(wakes, 0.5),
        "wake_p99_ms": pct(wakes, 0.99),
        "wake_max_ms": wakes[-1] * 1000 if wakes else float("nan"),
        "produce_p50_ms": pct(took, 0.5),
        "produce_p99_ms": pct(took, 0.99),
        "produce_mean_ms": statistics.fmean(took) * 1000,
        "rss_held_mb": rss_held,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, nargs="+", default=[100, 1_000, 10_000], help="held polls per round (one round each)")
    parser.add_argument("--wait-ms", type=int, default=60_000, help="wait_ms of each held poll")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = max(args.polls) + 200
    if hard != resource.RLIM_INFINITY and hard < need:
        sys.exit(f"needs {need} descriptors, the hard limit is {hard}: raise it (ulimit -Hn) and rerun")
    print(f"load average {os.getloadavg()[0]:.2f}; descriptors {hard}; wait_ms {args.wait_ms}")
    print("| held polls | answered FOUND | wake p50 | wake p99 | wake max | one produce p50 | one produce p99 | broker RSS, all held |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for polls in args.polls:
        with tempfile.TemporaryDirectory(prefix="tidemq-held-") as root:
            broker = Broker(root, CONFIG.format(held=polls + 10, connections=polls + 100, per_topic=QUEUES_PER_TOPIC))
            try:
                for topic in sorted({t for t, _ in targets(polls)}):
                    status, _ = broker.request("PUT", f"/v1/topics/{topic}", f'{{"queues": {QUEUES_PER_TOPIC}}}'.encode())
                    assert status in (200, 201), status
                r = asyncio.run(run(broker, polls, args.wait_ms))
            finally:
                broker.stop()
        print(
            f"| {polls:,} | {r['found']:,} | {r['wake_p50_ms']:.1f} ms | {r['wake_p99_ms']:.1f} ms | {r['wake_max_ms']:.1f} ms "
            f"| {r['produce_p50_ms']:.2f} ms | {r['produce_p99_ms']:.2f} ms | {r['rss_held_mb']:.0f} MB |",
            flush=True,
        )


if __name__ == "__main__":
    main()
