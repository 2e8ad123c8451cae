"""Event streams beside the rest of the broker: produce latency, CPU per produce, /metrics and a long
poll's wake-up with N streams open, against N = 0 in the same run; and the broker's anonymous memory
under a stream that never acks, against the same produce load without the stream.

latency: one broker process per round. N streams of one group are open, read and drained by this
process (asyncio, one task per stream): `idle` streams read a topic nothing is produced to (64
queues), `consuming` ones the produced topic (64 queues), each with room for every message of the
round. One keep-alive connection then produces `--produces` messages in sequence (128-byte raw
bodies, the same in every round) and records each produce's time; the broker's CPU time (utime +
stime from /proc) over the produces gives CPU per produce. Then five /metrics scrapes and five long
polls (held on a queue of a third topic, woken by a produce) are timed. Ratios are to the N = 0
round. Idle streams should cost a produce nothing; a consuming stream's delivery is work the broker
must do (each message goes to one stream: a receive, its checkpoint, the event), so CPU per produce
grows by about one receive there, and not with N.

rss: one broker process per run, `--minutes` each (QUICK: 1). A producer sends `--rate` messages/s to
a 4-queue topic; in the `stream` run one stream (max_in_flight 1,024, invisible_ms 1,000, the
minimum) takes every message and never acks, so each comes back about every 2 s until it is
dead-lettered (16 redeliveries); the `baseline` run has no stream. RssAnon of the broker is sampled
after a warm-up and at the end: the growth per minute of the two runs is the figure (before the fix
of the stream registry, 120 MB in 13 minutes with the stream, flat without).

Usage: python bench/stream_bench.py [--quick] [--mode latency|rss|both] [--streams N ...] [--produces P]
       [--minutes M] [--rate R]
Needs about max(N) + 200 descriptors here and in the broker (the hard RLIMIT_NOFILE).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.http_bench import Broker
from bench.load_generator import cpu_seconds

CONFIG = """
[broker]
max_streams = {streams}
max_streams_per_account = {streams}
max_wait_ms = 30000
[store]
mapped_file_size_commit_log_bytes = 67108864
mapped_file_size_consume_queue_bytes = 600000
"""
TOPIC = "streamed"
IDLE_TOPIC = "idle"
POLL_TOPIC = "polled"
BODY = b"x" * 128


def rss_anon_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes = b"") -> tuple[bytes, bytes]:
    """One request on a keep-alive connection; (status line and headers, body)."""
    writer.write(head + body)
    reply = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in reply.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    return reply, await reader.readexactly(length)


def produce_head(topic: str, queue: int | None = None) -> bytes:
    where = f"?queue_id={queue}" if queue is not None else ""
    return (
        f"POST /v1/topics/{topic}/messages{where} HTTP/1.1\r\nhost: b\r\n"
        f"content-type: application/octet-stream\r\ncontent-length: {len(BODY)}\r\n\r\n"
    ).encode()


class Streams:
    """N open streams, read and drained by one task each; `events` counts the message events seen."""

    def __init__(self) -> None:
        self.events = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def open(self, port: int, path: str, n: int) -> None:
        opened = [asyncio.Event() for _ in range(n)]
        self.tasks = [asyncio.create_task(self._one(port, path, e)) for e in opened]
        for event in opened:
            await event.wait()

    async def _one(self, port: int, path: str, opened: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        self.writers.append(writer)
        writer.write(f"GET {path} HTTP/1.1\r\nhost: b\r\naccept: text/event-stream\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"a stream was refused: {head[:200]!r}")
        opened.set()
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            self.events += chunk.count(b"event: message")

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1000 if ordered else float("nan")


@dataclass
class Round:
    streams: int
    kind: str
    p50_ms: float
    p99_ms: float
    cpu_us: float  # broker CPU per produce
    metrics_ms: float
    wake_ms: float
    delivered: int


async def latency_round(broker: Broker, n: int, kind: str, produces: int) -> Round:
    streams = Streams()
    read = TOPIC if kind == "consuming" else IDLE_TOPIC
    await streams.open(broker.port, f"/v1/groups/g/topics/{read}/stream?max_in_flight=1024&invisible_ms=600000", n)
    await asyncio.sleep(1.0)  # the streams' first reads are done
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    head = produce_head(TOPIC)
    for _ in range(50):  # warm-up, not counted
        await request(reader, writer, head, BODY)
    took: list[float] = []
    cpu_before = cpu_seconds(broker.proc.pid)
    for _ in range(produces):
        started = time.perf_counter()
        reply, _ = await request(reader, writer, head, BODY)
        took.append(time.perf_counter() - started)
        assert reply.startswith(b"HTTP/1.1 201"), reply[:100]
    cpu = cpu_seconds(broker.proc.pid) - cpu_before
    scrapes = []
    for _ in range(5):
        started = time.perf_counter()
        reply, _ = await request(reader, writer, b"GET /metrics HTTP/1.1\r\nhost: b\r\n\r\n")
        scrapes.append(time.perf_counter() - started)
    wakes = [await long_poll_wake(broker.port, reader, writer, i) for i in range(5)]
    writer.close()
    deadline = time.monotonic() + 30
    while streams.events < produces + 50 and kind == "consuming" and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    delivered = streams.events
    await streams.close()
    return Round(n, kind, pct(took, 0.5), pct(took, 0.99), cpu / produces * 1e6, pct(scrapes, 0.5), pct(wakes, 0.5), delivered)


async def long_poll_wake(port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, i: int) -> float:
    """A pull held on an empty queue, then a produce to it: seconds from the produce to the pull's answer."""
    poll_reader, poll_writer = await asyncio.open_connection("127.0.0.1", port)
    poll = f"GET /v1/topics/{POLL_TOPIC}/queues/0/messages?offset={i}&wait_ms=20000 HTTP/1.1\r\nhost: b\r\n\r\n".encode()
    answered = asyncio.create_task(request(poll_reader, poll_writer, poll))
    await asyncio.sleep(0.2)  # held
    started = time.perf_counter()
    await request(reader, writer, produce_head(POLL_TOPIC, 0), BODY)
    reply, body = await answered
    took = time.perf_counter() - started
    assert b'"FOUND"' in body, body[:200]
    poll_writer.close()
    return took


def run_latency(counts: list[int], produces: int) -> None:
    rounds = [(n, kind) for n in counts for kind in (("none",) if n == 0 else ("idle", "consuming"))]
    rows: list[Round] = []
    for n, kind in rounds:
        with tempfile.TemporaryDirectory(prefix="tidemq-streams-") as root:
            broker = Broker(root, CONFIG.format(streams=max(n, 1) + 10))
            try:
                for topic, queues in ((TOPIC, 64), (IDLE_TOPIC, 64), (POLL_TOPIC, 1)):
                    status, _ = broker.request("PUT", f"/v1/topics/{topic}", f'{{"queues": {queues}}}'.encode())
                    assert status in (200, 201), status
                rows.append(asyncio.run(latency_round(broker, n, kind, produces)))
            finally:
                broker.stop()
    base = rows[0]
    print(f"\nProduce with N streams open ({produces} sequential 128-byte produces per round; ratios to the first round)")
    print(
        "| streams | reading | produce p50 | p99 | p50 ratio | broker CPU per produce | CPU ratio | /metrics p50 | long-poll wake p50 | delivered |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.streams:,} | {r.kind} | {r.p50_ms:.2f} ms | {r.p99_ms:.2f} ms | {r.p50_ms / base.p50_ms:.2f} "
            f"| {r.cpu_us:.0f} µs | {r.cpu_us / base.cpu_us:.2f} | {r.metrics_ms:.1f} ms | {r.wake_ms:.1f} ms | {r.delivered:,} |",
            flush=True,
        )


async def rss_run(broker: Broker, with_stream: bool, seconds: float, rate: int) -> dict[str, float]:
    streams = Streams()
    if with_stream:
        await streams.open(broker.port, f"/v1/groups/never/topics/{TOPIC}/stream?max_in_flight=1024&invisible_ms=1000", 1)
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    head = produce_head(TOPIC)
    warmup = min(60.0, seconds / 4)
    started = time.monotonic()
    sent = 0
    first: tuple[float, float, int, float] | None = None  # (time, rss, events, cpu) after the warm-up
    while (now := time.monotonic()) - started < seconds:
        if first is None and now - started >= warmup:
            first = (now, rss_anon_mb(broker.proc.pid), streams.events, cpu_seconds(broker.proc.pid))
        due = int((now - started) * rate)
        while sent < due:
            reply, _ = await request(reader, writer, head, BODY)
            assert reply.startswith(b"HTTP/1.1 201"), reply[:100]
            sent += 1
        await asyncio.sleep(0.01)
    assert first is not None
    end = (time.monotonic(), rss_anon_mb(broker.proc.pid), streams.events, cpu_seconds(broker.proc.pid))
    writer.close()
    await streams.close()
    minutes = (end[0] - first[0]) / 60
    events = end[2] - first[2]
    return {
        "rss_start_mb": first[1],
        "rss_end_mb": end[1],
        "growth_mb_per_min": (end[1] - first[1]) / minutes,
        "events": events,
        "events_per_s": events / (end[0] - first[0]),
        "cpu_us_per_event": (end[3] - first[3]) / events * 1e6 if events else float("nan"),
        "produced": sent,
    }


def run_rss(minutes: float, rate: int) -> None:
    results: dict[str, dict[str, float]] = {}
    for name in ("baseline", "stream"):
        with tempfile.TemporaryDirectory(prefix="tidemq-rss-") as root:
            broker = Broker(root, CONFIG.format(streams=10))
            try:
                status, _ = broker.request("PUT", f"/v1/topics/{TOPIC}", b'{"queues": 4}')
                assert status in (200, 201), status
                results[name] = asyncio.run(rss_run(broker, name == "stream", minutes * 60, rate))
            finally:
                broker.stop()
    print(f"\nAnonymous RSS of the broker, {minutes:g} min per run, {rate} produces/s (growth measured after a warm-up)")
    print("| run | RssAnon after warm-up | at the end | growth per minute | stream events | events/s | broker CPU per event |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        cpu = f"{r['cpu_us_per_event']:.0f} µs" if r["events"] else "-"
        print(
            f"| {name} | {r['rss_start_mb']:.1f} MB | {r['rss_end_mb']:.1f} MB | {r['growth_mb_per_min']:+.2f} MB/min "
            f"| {r['events']:,} | {r['events_per_s']:.0f} | {cpu} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test: 0/200/1,000 streams, 500 produces; 1-minute RSS runs")
    parser.add_argument("--mode", choices=("latency", "rss", "both"), default="both")
    parser.add_argument(
        "--streams", type=int, nargs="+", default=[0, 200, 3_000], help="streams per latency round (the first is the baseline)"
    )
    parser.add_argument("--produces", type=int, default=3_000, help="produces timed per latency round")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of each RSS run")
    parser.add_argument("--rate", type=int, default=50, help="produces per second in the RSS runs")
    args = parser.parse_args()
    if args.quick:
        args.streams, args.produces, args.minutes = [0, 200, 1_000], 500, 1.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = max(args.streams) + 200
    if hard != resource.RLIM_INFINITY and hard < need:
        sys.exit(f"needs {need} descriptors, the hard limit is {hard}: raise it (ulimit -Hn) and rerun")
    print(f"load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; Python {sys.version.split()[0]}")
    if args.mode in ("latency", "both"):
        run_latency(args.streams, args.produces)
    if args.mode in ("rss", "both"):
        run_rss(args.minutes, args.rate)


if __name__ == "__main__":
    main()
