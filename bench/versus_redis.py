"""tidemq beside Redis Streams, measured in one run on one machine.

1. Delivery: a producer sends at a fixed rate (default 1,000 msg/s) and a consumer in another
   process reads with a held long poll (tidemq) or `XREAD BLOCK` (Redis); p50/p99 from the start of
   the send to the consumer holding the message.
2. Durable puts with many producers: tidemq with `--flush sync` (a produce is answered after its
   group commit reached the disk) and Redis with `appendfsync always`, each with 1 and with N
   concurrent producers of 1 KiB messages; tidemq's producers are asyncio connections in this
   process, Redis's are `redis-benchmark -c N XADD`.

Redis is started here from Debian's redis-server (installed with apt-get when missing and possible;
else its rows say why they are empty). Every tidemq figure is printed beside the Redis figure of
the same run, because the machine is shared and absolute numbers drift.

Usage: python bench/versus_redis.py [--rate N] [--seconds S] [--producers N]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.compare_peers import RedisPeer, Unavailable
from bench.http_bench import STORE_CONFIG, Broker, delivery_latency

BODY_BYTES = 1024


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


# Redis delivery ---------------------------------------------------------------------------


def redis_consume(port: int, count: int, deadline_s: float, out: Any) -> None:
    import redis

    client = redis.Redis(port=port)
    last, latencies = "$", []
    end = time.monotonic() + deadline_s
    while len(latencies) < count and time.monotonic() < end:
        reply = client.xread({"lat": last}, block=1000, count=32)
        now = time.monotonic_ns()
        for _, entries in reply or ():
            for entry_id, fields in entries:
                latencies.append((now - int(fields[b"t"])) / 1e6)
                last = entry_id
    out.put(latencies)


def redis_delivery(port: int, rate: int, seconds: float) -> tuple[float, float, int]:
    import redis

    count = int(rate * seconds)
    results: multiprocessing.Queue = multiprocessing.Queue()
    consumer = multiprocessing.Process(target=redis_consume, args=(port, count, seconds + 30, results))
    consumer.start()
    time.sleep(0.5)  # the consumer's first XREAD is blocked before the first send
    client = redis.Redis(port=port)
    interval, next_send = 1.0 / rate, time.monotonic()
    for _ in range(count):
        while time.monotonic() < next_send:
            time.sleep(max(0.0, next_send - time.monotonic() - 0.0005))
        client.xadd("lat", {"t": str(time.monotonic_ns())})
        next_send += interval
    latencies = sorted(results.get(timeout=seconds + 60))
    consumer.join(10)
    return percentile(latencies, 0.5), percentile(latencies, 0.99), len(latencies)


# Durable puts -----------------------------------------------------------------------------


async def tidemq_producer(port: int, stop_at: float, counts: list[int], i: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b"x" * BODY_BYTES
    head = f"POST /v1/topics/sync/messages?queue_id={i % 4} HTTP/1.1\r\nhost: b\r\ncontent-type: application/octet-stream\r\n"
    request = (head + f"content-length: {len(body)}\r\n\r\n").encode() + body
    n = 0
    while time.perf_counter() < stop_at:
        writer.write(request)
        reply = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in reply.split(b"\r\n") if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
        n += reply.startswith(b"HTTP/1.1 201")
    counts[i] = n
    writer.close()


async def tidemq_durable_rate(port: int, producers: int, seconds: float) -> float:
    counts = [0] * producers
    stop_at = time.perf_counter() + seconds
    await asyncio.gather(*(tidemq_producer(port, stop_at, counts, i) for i in range(producers)))
    return sum(counts) / seconds


def redis_durable_rate(port: int, producers: int, seconds: float) -> float:
    """XADD of 1 KiB values with `producers` connections, for about `seconds`."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        raise Unavailable("redis-benchmark is not installed")
    value = "v" * BODY_BYTES
    requests = max(producers * 20, int(2_000 * seconds))
    argv = [binary, "-p", str(port), "-c", str(producers), "-n", str(requests), "-q", "XADD", "dur", "*", "f", value]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False).stdout
    match = re.search(r"([\d.]+) requests per second", out.replace("\r", "\n"))
    if match is None:
        raise Unavailable(f"redis-benchmark printed no rate: {out[-200:]!r}")
    return float(match.group(1))


# Run --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1_000, help="messages per second of the delivery test")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--producers", type=int, default=64, help="concurrent producers of the durable-put test")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.seconds:g} s per measurement; bodies of {BODY_BYTES} B", flush=True)
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="tidemq-vs-redis-") as root:
        latency_root = os.path.join(root, "latency")
        os.makedirs(latency_root)
        broker = Broker(latency_root, STORE_CONFIG)
        try:
            t50, t99, n = delivery_latency(broker, args.rate, args.seconds)
        finally:
            broker.stop()
        tidemq_delivery = (t50, t99, n)
        sync_root = os.path.join(root, "s")
        os.makedirs(sync_root)
        broker = Broker(sync_root, STORE_CONFIG + 'flush_disk_type = "SYNC_FLUSH"\n')
        try:
            broker.request("PUT", "/v1/topics/sync", b'{"queues": 4}')
            t_one = asyncio.run(tidemq_durable_rate(broker.port, 1, args.seconds))
            t_many = asyncio.run(tidemq_durable_rate(broker.port, args.producers, args.seconds))
        finally:
            broker.stop()
        redis_rows = run_redis(root, args)
    r50, r99, rn, r_one, r_many, why = redis_rows
    rows.append(("delivery p50", f"{tidemq_delivery[0]:.2f} ms", f"{r50:.2f} ms", ratio(tidemq_delivery[0], r50)))
    rows.append(("delivery p99", f"{tidemq_delivery[1]:.2f} ms", f"{r99:.2f} ms", ratio(tidemq_delivery[1], r99)))
    rows.append(("durable puts, 1 producer", f"{t_one:,.0f}/s", f"{r_one:,.0f}/s", ratio(t_one, r_one)))
    rows.append((f"durable puts, {args.producers} producers", f"{t_many:,.0f}/s", f"{r_many:,.0f}/s", ratio(t_many, r_many)))
    print(f"delivery at {args.rate}/s: tidemq {tidemq_delivery[2]} messages received, redis {rn}")
    print(f"tidemq durable puts: {args.producers} producers = {t_many / t_one if t_one else float('nan'):.1f}x one producer")
    if why:
        print(f"redis: {why}")
    print("| figure | tidemq | redis | tidemq / redis |\n|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b and b == b and a == a else "-"


def run_redis(root: str, args: argparse.Namespace) -> tuple[float, float, int, float, float, str]:
    nan = float("nan")
    results: dict[str, float] = {}
    for mode in ("everysec", "always"):
        peer = RedisPeer(mode)
        try:
            peer.ensure_available(True, [])
            peer.start(Path(root))
        except Unavailable as exc:
            return nan, nan, 0, nan, nan, str(exc)
        try:
            if mode == "everysec":
                results["p50"], results["p99"], results["n"] = redis_delivery(peer.port, args.rate, args.seconds)
            else:
                results["one"] = redis_durable_rate(peer.port, 1, args.seconds)
                results["many"] = redis_durable_rate(peer.port, args.producers, args.seconds)
        finally:
            peer.stop()
    return results["p50"], results["p99"], int(results["n"]), results["one"], results["many"], ""


if __name__ == "__main__":
    main()
