"""The workloads, written once against `BrokerClient` and run the same way for every system.

- produce: `count` messages of `size` bytes from `concurrency` tasks, one message per call or
  `batch` messages per call; figure = messages/s over the whole run.
- catch-up: `count` messages are stored first (untimed, in batches), then one consumer reads
  them all from the start; figure = messages/s of the read.
- latency: one producer sends at a fixed `rate_per_s` (open loop: each send starts on its
  schedule whatever the previous ones do, at most `in_flight_max` in flight) while one
  tail consumer receives; each body starts with the send time, so latency = receipt - send on
  the same monotonic clock (producer and consumer share one process and event loop).
- durable produce: the produce workload, one message per call, against the durable configuration.

Invariants: bodies are printable ASCII (so tidemq's JSON batches carry them as utf-8 text) and
are made before the clock starts; every run checks that what it counted equals what it sent.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from bench.compare_clients import BrokerClient

# Distinct bodies made per size; the runs cycle through them.
BODY_POOL = 256
# Digits of the send timestamp (nanoseconds) at the start of a latency-test body.
STAMP_DIGITS = 20
# Longest the latency consumer may lag behind the last send before the missing messages count as lost.
LATENCY_DRAIN_S = 10.0
# Messages per call when storing the catch-up backlog (untimed).
PRELOAD_BATCH = 1000
# Tasks storing the catch-up backlog.
PRELOAD_CONCURRENCY = 4


def make_bodies(size: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return [bytes(rng.choices(alphabet, k=size)) for _ in range(BODY_POOL)]


@dataclass
class Throughput:
    messages: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


async def warm_up(client: BrokerClient, concurrency: int) -> None:
    """Open every pooled connection and touch each code path once, outside any timing."""
    channel = "warm-up"
    await client.setup(channel)
    try:
        bodies = make_bodies(128, seed=1)
        await produce(client, channel, bodies, 2 * concurrency, concurrency, 1)
        await produce(client, channel, bodies, 200, 2, 100)
        await client.consume(channel, 2 * concurrency + 200)
    finally:
        await client.teardown(channel)


@dataclass
class Latency:
    sent: int
    received: int
    send_seconds: float  # from the first scheduled send to the last send's reply
    samples_us: list[float] = field(default_factory=list)  # sorted, warm-up excluded

    def quantile(self, q: float) -> float:
        if not self.samples_us:
            return float("nan")
        return self.samples_us[min(len(self.samples_us) - 1, int(q * len(self.samples_us)))]


async def produce(client: BrokerClient, channel: str, bodies: list[bytes], count: int, concurrency: int, batch: int) -> Throughput:
    """Send `count` messages (a multiple of batch) from `concurrency` tasks, `batch` per call."""
    assert count % batch == 0, (count, batch)
    calls = count // batch
    next_call = 0
    ring = bodies * (batch // len(bodies) + 2)  # any batch is one slice of it, however the pool and batch sizes compare

    async def worker() -> None:
        nonlocal next_call
        while next_call < calls:
            i = next_call
            next_call += 1
            if batch == 1:
                await client.produce_one(channel, bodies[i % len(bodies)])
            else:
                start = (i * batch) % len(bodies)
                await client.produce_batch(channel, ring[start : start + batch])

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, calls))))
    return Throughput(count, time.perf_counter() - started)


async def catch_up(client: BrokerClient, channel: str, bodies: list[bytes], count: int) -> tuple[Throughput, Throughput]:
    """Store `count` messages, then read them all back; returns (store, read) throughputs."""
    batch = min(PRELOAD_BATCH, count)
    stored = await produce(client, channel, bodies, count - count % batch, PRELOAD_CONCURRENCY, batch)
    started = time.perf_counter()
    got = await client.consume(channel, stored.messages)
    read = Throughput(stored.messages, time.perf_counter() - started)
    expected = stored.messages * len(bodies[0])
    if got != expected:
        raise AssertionError(f"{client.system} catch-up read {got} body bytes, expected {expected}")
    return stored, read


async def latency(client: BrokerClient, channel: str, size: int, rate_per_s: int, count: int, warmup: int, in_flight_max: int) -> Latency:
    """Send count + warmup messages at rate_per_s; the first `warmup` are left out of the samples.

    At most `in_flight_max` sends are outstanding; a system that cannot keep up holds the
    producer back, which shows as an achieved rate below `rate_per_s` (sent / send_seconds).
    """
    assert size > STAMP_DIGITS
    pad = b"x" * (size - STAMP_DIGITS)
    total = count + warmup
    samples: list[int] = []
    received = 0
    stop, armed, done = asyncio.Event(), asyncio.Event(), asyncio.Event()

    def sink(body: bytes) -> None:
        nonlocal received
        now = time.perf_counter_ns()
        stamp = int(body[:STAMP_DIGITS])
        samples.append(now - stamp)
        received += 1
        if received >= total:
            done.set()

    consumer = asyncio.create_task(client.tail(channel, sink, stop, armed))
    await asyncio.wait_for(armed.wait(), timeout=30)
    await asyncio.sleep(0.2)  # the consumer's first read is in flight
    in_flight = asyncio.Semaphore(in_flight_max)
    sends: set[asyncio.Task[None]] = set()
    send_errors: list[BaseException] = []

    async def send_one() -> None:
        try:
            body = b"%020d" % time.perf_counter_ns() + pad
            await client.produce_one(channel, body)
        except Exception as e:  # kept and raised once the run is over
            send_errors.append(e)
        finally:
            in_flight.release()

    period = 1.0 / rate_per_s
    t0 = time.perf_counter()
    try:
        for i in range(total):
            delay = t0 + i * period - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await in_flight.acquire()
            task = asyncio.create_task(send_one())
            sends.add(task)
            task.add_done_callback(sends.discard)
        await asyncio.gather(*list(sends))
        send_seconds = time.perf_counter() - t0
        with_timeout = asyncio.wait_for(done.wait(), timeout=LATENCY_DRAIN_S)
        try:
            await with_timeout
        except TimeoutError:
            pass
    finally:
        stop.set()
        try:
            await asyncio.wait_for(consumer, timeout=LATENCY_DRAIN_S)
        except TimeoutError:
            consumer.cancel()
    if send_errors:
        raise send_errors[0]
    # Samples arrive in send order per channel; the first `warmup` are the warm-up sends.
    kept = sorted(s / 1000 for s in samples[warmup:])
    return Latency(sent=total, received=received, send_seconds=send_seconds, samples_us=kept)
