"""tidemq beside Redis Streams, measured in one run on one machine.

1. Delivery: a producer sends at a fixed rate (default 1,000 msg/s) and a consumer in another
   process reads with a held long poll (tidemq) or `XREAD BLOCK` (Redis); p50/p99 from the start of
   the send to the consumer holding the message.
2. Durable puts with many producers: tidemq with `--flush sync` (a produce is answered after its
   group commit reached the disk) and Redis with `appendfsync always`, each with 1 and with N
   concurrent producers of 1 KiB messages; tidemq's producers are asyncio connections in this
   process, Redis's are `redis-benchmark -c N XADD`.
3. Batch produce without fsync: binary batches of 100 x 1 KiB (application/x-tidemq-batch) driven
   by wrk against `redis-benchmark -P 100` XADD with as many connections, and sent from Python
   (httpx) against redis-py pipelines of 100 XADDs, from 1 and from N client processes; tidemq
   with ASYNC_FLUSH (page cache, flushed in the background), Redis with no persistence at all.

Redis is started here from Debian's redis-server (installed with apt-get when missing and possible;
else its rows say why they are empty). Every tidemq figure is printed beside the Redis figure of
the same run, because the machine is shared and absolute numbers drift.

Usage: python bench/versus_redis.py [--only delivery,durable,batch] [--quick] [--rate N] [--seconds S]
       [--producers N] [--connections N] [--py-clients N]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import multiprocessing
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.compare_peers import RedisPeer, Unavailable
from bench.http_bench import STORE_CONFIG, Broker, binary_batch, delivery_latency, ensure_wrk, post_script, wrk

BODY_BYTES = 1024
BATCH = 100  # messages per binary batch, XADDs per redis-benchmark -P pipeline and per redis-py execute
BATCH_TOPIC = "batch"
BATCH_MEDIA_TYPE = "application/x-tidemq-batch"
# Most XADDs of one measured redis-benchmark run: 3 M entries of 1 KiB hold about 3.5 GB in Redis.
BENCH_MAX_REQUESTS = 3_000_000
SECTIONS = ("delivery", "durable", "batch")


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


# Batch produce without fsync -------------------------------------------------------------


class RedisInMemory(RedisPeer):
    """Redis with no persistence at all (no AOF, no RDB snapshots): the peer of tidemq's ASYNC_FLUSH."""

    def __init__(self) -> None:
        super().__init__("everysec")
        self.label = "redis (appendonly no, save '')"

    def argv(self, data_dir: Path) -> list[str]:
        assert self.binary_path
        return [
            self.binary_path, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(data_dir),
            "--appendonly", "no", "--save", "", "--daemonize", "no",
        ]  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_benchmark_argv(port: int, clients: int, requests: int) -> list[str]:
    """XADD of one 1 KiB field, BATCH commands pipelined per connection (-d only sizes the built-in tests)."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        raise Unavailable("redis-benchmark is not installed")
    value = "v" * BODY_BYTES
    return [binary, "-p", str(port), "-c", str(clients), "-n", str(requests), "-P", str(BATCH), "--csv", "XADD", "batch", "*", "f", value]


def redis_benchmark_xadd(port: int, clients: int, requests: int) -> float:
    """XADDs per second of one redis-benchmark run (its --csv `rps` column)."""
    argv = redis_benchmark_argv(port, clients, requests)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    if not rows or "rps" not in rows[-1]:
        raise Unavailable(f"redis-benchmark printed no rate: {out[-200:]!r}")
    return float(rows[-1]["rps"])


def redis_flush(port: int) -> None:
    """Drop the stream between runs: each run starts from an empty server, and memory stays bounded."""
    import redis

    redis.Redis(port=port).flushall()


def redis_py_client(port: int, seconds: float, start: Any, out: Any) -> None:
    """Client process: redis-py pipelines of BATCH XADDs (no MULTI/EXEC), one execute after another."""
    import redis

    client = redis.Redis(port=port)
    value = b"v" * BODY_BYTES

    def send() -> int:
        pipe = client.pipeline(transaction=False)
        for _ in range(BATCH):
            pipe.xadd("batch", {"f": value})
        return len(pipe.execute())

    timed_sends(send, seconds, start, out)


def timed_sends(send: Callable[[], int], seconds: float, start: Any, out: Any) -> None:
    """A client process's run: one `send` to warm up, then, from `start`, sends for `seconds`;
    (messages sent, CPU seconds used) go to `out`."""
    send()
    start.wait()
    sent, used, stop_at = 0, time.process_time(), time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        sent += send()
    out.put((sent, time.process_time() - used))


def tidemq_py_client(port: int, seconds: float, start: Any, out: Any) -> None:
    """Client process: httpx posts of a binary batch of BATCH messages, built anew (fresh UNIQ_KEYs) for each request."""
    import httpx

    body = b"x" * BODY_BYTES
    headers = {"content-type": BATCH_MEDIA_TYPE}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:

        def send() -> int:
            reply = client.post(f"/v1/topics/{BATCH_TOPIC}/messages", content=binary_batch(body, BATCH), headers=headers)
            if reply.status_code != 201:
                raise RuntimeError(f"produce answered {reply.status_code}: {reply.text[:200]}")
            return int(reply.json()["count"])

        timed_sends(send, seconds, start, out)


@dataclass
class Rate:
    messages_per_s: float = float("nan")
    server_cores: float = float("nan")  # CPU the server used during the measurement, in cores
    client_cores: float = float("nan")  # CPU the load generator(s) used meanwhile, in cores

    def cpu(self) -> str:
        return f"{self.server_cores:.2f} + {self.client_cores:.2f}"

    def server_us_per_message(self) -> float:
        """Server CPU per message stored: a figure the machine's other load moves less than the rate."""
        return self.server_cores / self.messages_per_s * 1e6 if self.messages_per_s else float("nan")


@dataclass
class BatchFigures:
    bench: Rate = field(default_factory=Rate)  # redis-benchmark -P BATCH XADD, or tidemq binary batches from wrk
    py_one: Rate = field(default_factory=Rate)  # one Python client process
    py_many: Rate = field(default_factory=Rate)  # args.py_clients Python client processes
    note: str = ""


def children_cpu() -> float:
    """CPU seconds of this process's reaped children (wrk, redis-benchmark)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def client_processes(target: Callable[[int, float, Any, Any], None], port: int, count: int, seconds: float, server_pid: int) -> Rate:
    """`count` client processes, started together once each has sent one batch; their CPU and the server's meanwhile."""
    start = multiprocessing.Barrier(count + 1)
    out: multiprocessing.Queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=target, args=(port, seconds, start, out)) for _ in range(count)]
    for proc in procs:
        proc.start()
    try:
        start.wait(timeout=60)
        server, started = cpu_seconds(server_pid), time.perf_counter()
        results = [out.get(timeout=seconds + 60) for _ in procs]
        elapsed = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    sent, client = (sum(column) for column in zip(*results, strict=True))
    return Rate(sent / seconds, (cpu_seconds(server_pid) - server) / elapsed, client / seconds)


def redis_bench(peer: RedisInMemory, args: argparse.Namespace, figures: BatchFigures) -> None:
    """redis-benchmark -P BATCH XADD, sized by a short run to last about `seconds`; the server's CPU use during it."""
    assert peer.proc is not None
    # redis-benchmark counts requests, not time: a short run sizes the measured one.
    calibration = redis_benchmark_xadd(peer.port, args.connections, 50_000 if args.quick else 200_000)
    redis_flush(peer.port)
    requests = int(min(max(calibration * args.seconds, 100_000), BENCH_MAX_REQUESTS))
    server, client, started = cpu_seconds(peer.proc.pid), children_cpu(), time.perf_counter()
    rate = redis_benchmark_xadd(peer.port, args.connections, requests)
    elapsed = time.perf_counter() - started
    figures.bench = Rate(rate, (cpu_seconds(peer.proc.pid) - server) / elapsed, (children_cpu() - client) / elapsed)
    redis_flush(peer.port)
    figures.note = shlex.join(redis_benchmark_argv(peer.port, args.connections, requests)[:-1]) + f" <{BODY_BYTES} x 'v'>"


def tidemq_wrk(broker: Broker, binary: str, args: argparse.Namespace, figures: BatchFigures) -> None:
    """wrk posting one pre-built binary batch, after a warm-up; the broker's CPU use during it."""
    url = f"http://127.0.0.1:{broker.port}"
    path = f"/v1/topics/{BATCH_TOPIC}/messages"  # no queue_id: round-robin over the 4 queues, one per request
    script = post_script(binary_batch(b"x" * BODY_BYTES, BATCH), BATCH_MEDIA_TYPE, path)
    wrk(binary, url, script, 1 if args.quick else 2, args.connections, broker.root)  # warm-up, not counted
    seconds = max(1, round(args.seconds))
    server, client, started = cpu_seconds(broker.proc.pid), children_cpu(), time.perf_counter()
    rate, errors = wrk(binary, url, script, seconds, args.connections, broker.root)
    elapsed = time.perf_counter() - started
    figures.bench = Rate(rate * BATCH, (cpu_seconds(broker.proc.pid) - server) / elapsed, (children_cpu() - client) / elapsed)
    figures.note = f"{binary} -t1 -c{args.connections} -d{seconds}s --timeout 10s -s batch.lua {url} ({errors} errors)"


def start_redis(root: str) -> tuple[RedisInMemory | None, str]:
    peer = RedisInMemory()
    reason = peer.start_or_reason(Path(root))
    return (None, reason) if reason is not None else (peer, "")


def batch_pairs(peer: RedisInMemory | None, broker: Broker, args: argparse.Namespace) -> tuple[BatchFigures, BatchFigures]:
    """Each Redis figure and its tidemq counterpart back to back, both servers up, so drift on the machine hits both alike."""
    tidemq, redis = BatchFigures(), BatchFigures()
    binary = ensure_wrk()
    if peer is not None:
        redis_bench(peer, args, redis)
    if binary is None:
        tidemq.note = "wrk is not installed and cannot be installed here (apt-get install -y wrk)"
    else:
        tidemq_wrk(broker, binary, args, tidemq)
    for count, name in ((1, "py_one"), (args.py_clients, "py_many")):
        if peer is not None and peer.proc is not None:
            setattr(redis, name, client_processes(redis_py_client, peer.port, count, args.seconds, peer.proc.pid))
            redis_flush(peer.port)
        setattr(tidemq, name, client_processes(tidemq_py_client, broker.port, count, args.seconds, broker.proc.pid))
    return tidemq, redis


def report_batch(args: argparse.Namespace, tidemq: BatchFigures, redis: BatchFigures) -> None:
    print(
        f"\nBatch produce of {BATCH} x {BODY_BYTES} B without fsync: tidemq with ASYNC_FLUSH (the commitlog in the page cache, "
        "flushed by a background thread; a reply does not wait for the disk), Redis with appendonly no and save '' (memory only)."
    )
    print(f"tidemq wrk: {tidemq.note}\n  batch.lua: POST /v1/topics/{BATCH_TOPIC}/messages, {BATCH_MEDIA_TYPE}, one pre-built body")
    print(f"redis-benchmark: {redis.note}")
    print(f"Python clients: httpx (tidemq) and redis-py pipeline(transaction=False) (Redis), 1 and {args.py_clients} client processes")
    print("CPU: cores the server + the load generator(s) used during each measurement (2 cores in all here)")
    rows = [
        (f"binary batch, wrk {args.connections} conns / redis-benchmark -c {args.connections} -P {BATCH}", tidemq.bench, redis.bench, 1.0),
        ("Python, 1 client: httpx binary batch / redis-py pipeline", tidemq.py_one, redis.py_one, 3.0),
        (f"Python, {args.py_clients} clients: httpx binary batch / redis-py pipeline", tidemq.py_many, redis.py_many, 3.0),
    ]
    print("| figure | tidemq msg/s | redis msg/s | tidemq / redis | target | tidemq CPU | redis CPU |\n|---|---:|---:|---:|---|---:|---:|")
    for name, ours, theirs, target in rows:
        got = ratio(ours.messages_per_s, theirs.messages_per_s)
        met = "-" if got == "-" else ("met" if float(got) >= target else "NOT met")
        cells = [
            name,
            f"{ours.messages_per_s:,.0f}",
            f"{theirs.messages_per_s:,.0f}",
            got,
            f">= {target:.1f}: {met}",
            ours.cpu(),
            theirs.cpu(),
        ]
        print("| " + " | ".join(cells) + " |")
    ours, theirs = tidemq.bench.server_us_per_message(), redis.bench.server_us_per_message()
    print(f"Server CPU per message in the first row: tidemq {ours:.2f} us, redis {theirs:.2f} us (tidemq / redis {ratio(ours, theirs)})")


def batch_vs_redis(root: str, args: argparse.Namespace) -> None:
    peer, why = start_redis(root)
    broker_root = os.path.join(root, "batch")
    os.makedirs(broker_root)
    try:
        broker = Broker(broker_root, STORE_CONFIG + 'flush_disk_type = "ASYNC_FLUSH"\n')
        try:
            status, reply = broker.request("PUT", f"/v1/topics/{BATCH_TOPIC}", b'{"queues": 4}')
            assert status in (200, 201), reply[:200]
            tidemq, redis = batch_pairs(peer, broker, args)
        finally:
            broker.stop()
    finally:
        if peer is not None:
            peer.stop()
    redis.note = redis.note or why
    report_batch(args, tidemq, redis)


# Run --------------------------------------------------------------------------------------


def delivery_and_durable(root: str, args: argparse.Namespace, sections: set[str]) -> None:
    nan = float("nan")
    t50 = t99 = t_one = t_many = t_async = nan
    tn = 0
    if "delivery" in sections:
        latency_root = os.path.join(root, "latency")
        os.makedirs(latency_root)
        broker = Broker(latency_root, STORE_CONFIG)
        try:
            t50, t99, tn = delivery_latency(broker, args.rate, args.seconds)
        finally:
            broker.stop()
    if "durable" in sections:
        sync_root = os.path.join(root, "s")
        os.makedirs(sync_root)
        broker = Broker(sync_root, STORE_CONFIG + 'flush_disk_type = "SYNC_FLUSH"\n')
        try:
            broker.request("PUT", "/v1/topics/sync", b'{"queues": 4}')
            t_one = asyncio.run(tidemq_durable_rate(broker.port, 1, args.seconds))
            t_many = asyncio.run(tidemq_durable_rate(broker.port, args.producers, args.seconds))
        finally:
            broker.stop()
        t_async = async_ceiling(root, args)
    r50, r99, rn, r_one, r_many, why = run_redis(root, args, sections)
    rows: list[tuple[str, str, str, str]] = []
    if "delivery" in sections:
        rows.append(("delivery p50", f"{t50:.2f} ms", f"{r50:.2f} ms", ratio(t50, r50)))
        rows.append(("delivery p99", f"{t99:.2f} ms", f"{r99:.2f} ms", ratio(t99, r99)))
        print(f"delivery at {args.rate}/s: tidemq {tn} messages received, redis {rn}")
    if "durable" in sections:
        rows.append(("durable puts, 1 producer", f"{t_one:,.0f}/s", f"{r_one:,.0f}/s", ratio(t_one, r_one)))
        rows.append((f"durable puts, {args.producers} producers", f"{t_many:,.0f}/s", f"{r_many:,.0f}/s", ratio(t_many, r_many)))
        print(f"tidemq durable puts: {args.producers} producers = {t_many / t_one if t_one else float('nan'):.1f}x one producer")
        print(
            f"tidemq, same {args.producers} producers without the durability wait (ASYNC_FLUSH): {t_async:,.0f}/s; "
            f"SYNC_FLUSH reaches {t_many / t_async if t_async else float('nan'):.2f} of it (1.0: the flush costs nothing, "
            "the HTTP work per request is the limit)"
        )
    if why:
        print(f"redis: {why}")
    print("| figure | tidemq | redis | tidemq / redis |\n|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def async_ceiling(root: str, args: argparse.Namespace) -> float:
    """Puts per second of the durable-put load on an ASYNC_FLUSH broker: what the same requests cost without the wait."""
    async_root = os.path.join(root, "a")
    os.makedirs(async_root)
    broker = Broker(async_root, STORE_CONFIG + 'flush_disk_type = "ASYNC_FLUSH"\n')
    try:
        broker.request("PUT", "/v1/topics/sync", b'{"queues": 4}')
        return asyncio.run(tidemq_durable_rate(broker.port, args.producers, args.seconds))
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections to run, of {','.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="a smoke test: 2 s per measurement, 200 msg/s delivery")
    parser.add_argument("--rate", type=int, default=1_000, help="messages per second of the delivery test")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--producers", type=int, default=64, help="concurrent producers of the durable-put test")
    parser.add_argument("--connections", type=int, default=50, help="wrk connections and redis-benchmark clients (its default: 50)")
    parser.add_argument("--py-clients", type=int, default=4, help="client processes of the many-client Python rows")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    if not sections <= set(SECTIONS):
        parser.error(f"--only takes {','.join(SECTIONS)}, not {args.only}")
    if args.quick:
        args.seconds, args.rate = min(args.seconds, 2.0), min(args.rate, 200)
    print(
        f"load average {load_average()}; {args.seconds:g} s per measurement; bodies of {BODY_BYTES} B; {os.cpu_count()} cores", flush=True
    )
    with tempfile.TemporaryDirectory(prefix="tidemq-vs-redis-") as root:
        if sections & {"delivery", "durable"}:
            delivery_and_durable(root, args, sections)
        if "batch" in sections:
            batch_vs_redis(root, args)
    print(f"load average at the end {load_average()}")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b and b == b and a == a else "-"


def run_redis(root: str, args: argparse.Namespace, sections: set[str]) -> tuple[float, float, int, float, float, str]:
    nan = float("nan")
    results: dict[str, float] = {"p50": nan, "p99": nan, "n": 0, "one": nan, "many": nan}
    for mode, section in (("everysec", "delivery"), ("always", "durable")):
        if section not in sections:
            continue
        peer = RedisPeer(mode)
        reason = peer.start_or_reason(Path(root))
        if reason is not None:
            return nan, nan, 0, nan, nan, reason
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
