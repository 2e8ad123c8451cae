"""tidemq beside Redis Streams and a plain-ASGI no-op, measured in one run on one machine.

Every figure gives the server's CPU per request or message (the process CPU clock around the
measurement) beside its rate, and the 1-minute load average at its end; a ratio of CPU per
message is what a target is judged by, because the machine is shared and rates drift with the
other work on it. Both sides of every comparison use the same load generator and the payload
the label says:

1. requests: one C generator (bench/loadgen.c: one thread, epoll, closed loop, `--connections`
   keep-alive connections) drives the plain-ASGI no-op (bench/noop_asgi.py), tidemq (ASYNC_FLUSH)
   and Redis without persistence alike: no-op GET, GET /healthz, single JSON produce of a 1 KiB
   body, JSON and binary batches of 100 x 1 KiB, against XADD of a 1 KiB field and 100 XADDs
   pipelined in one write. `--rounds` interleaved rounds (default 3, every other one in reverse
   order); each figure is the round with the median server CPU per request.
2. durable (bench/versus_durable.py): the same generator with 1 and `--producers` connections posting 1 KiB raw
   bodies to tidemq with SYNC_FLUSH (answered after the group commit's flush) and sending XADD of 1 KiB to
   Redis with `appendfsync always`, rounds interleaved; beside them tidemq with its event loop
   handing each turn's flush wait to the flush thread (`durable_wait_in_loop_ms = 0`), tidemq whose groups
   never linger (`durable_group_linger_us = 0`), one thread's raw write + fdatasync of a 1 KiB record on the
   same disk, and the tidemq load on ASYNC_FLUSH; every tidemq row with the messages a flush served.
3. delivery: a Python producer sends 1 KiB messages at `--rate` per second, whose first 20 bytes
   are the send's start on CLOCK_MONOTONIC, and a Python consumer in another process holds a
   long poll (tidemq's pull; Redis `XREAD BLOCK`) or a group receive that it acks at once
   (tidemq's receive + ack; Redis `XREADGROUP BLOCK` + `XACK`): p50/p99 from the send's start to
   the consumer holding the message, and to the ack answered; `--rounds` rounds, tidemq's and
   Redis's interleaved (every other round Redis first), each figure pooling its rounds' latencies
   and CPU. Producer and consumer use one client for both servers (bench/wire_client.py: a socket,
   one send per request, a reader of the reply's framing; JSON decoded with json.loads), so the
   client-side cost is alike on both sides.
4. batch: Python client processes (httpx posting binary batches; redis-py pipelines of 100 XADDs),
   1 and `--py-clients` of them, 100 x 1 KiB per request.

Redis is Debian's redis-server (installed with apt-get when missing and possible; else its rows
say why they are empty). Between sections what the section's servers stored is removed and the disk synced, so a
section does not run beside the previous one's write-back or page cache.

Usage: python bench/versus_redis.py [--only requests,durable,delivery,batch] [--quick] [--rounds N]
       [--seconds S] [--rate N] [--producers N] [--connections N] [--py-clients N]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.compare_peers import RedisPeer
from bench.http_bench import STORE_CONFIG, Broker, binary_batch
from bench.load_generator import Measured, cpu_seconds, http_request, load_average, loadgen, median_of, resp_command
from bench.noop_asgi import NoopServer
from bench.versus_common import BODY_BYTES, RedisInMemory, percentile, print_table, ratio, redis_flush, start_redis
from bench.versus_durable import durable_section
from bench.wire_client import RespValue, WireConnection

BATCH = 100  # messages per batch request, XADDs per pipelined write and per redis-py execute
BATCH_MEDIA_TYPE = "application/x-tidemq-batch"
SECTIONS = ("requests", "durable", "delivery", "batch")
STAMP_DIGITS = 20  # the send time at the head of a delivery test's body, zero-padded nanoseconds


@dataclass
class Scenario:
    """One load the generator applies: a request, where to, and how its replies are counted."""

    name: str
    port: int
    pid: int
    request: bytes
    protocol: str = "http"
    replies: int = 1
    messages: int = 1
    after: Callable[[], None] | None = None  # run after each measurement (Redis: drop the stream)


def measure_rounds(scenarios: list[Scenario], rounds: int, connections: int, seconds: float) -> dict[str, Measured]:
    """Every scenario once per round, rounds interleaved, every other round in reverse order (a row after a batch row
    runs while the page-cache window trims what that row wrote); per scenario the round with the median CPU per
    request.
    Each measurement starts with no write-back under way (`os.sync` first, outside it): the gigabytes a batch row
    leaves dirty would otherwise be written back during the next rows, Redis's and the no-op's too, and slow them."""
    runs: dict[str, list[Measured]] = {s.name: [] for s in scenarios}
    for r in range(rounds):
        for s in scenarios if r % 2 == 0 else scenarios[::-1]:  # no row always follows the same one
            os.sync()
            m = loadgen(s.port, s.request, s.protocol, s.pid, connections, seconds, s.replies, s.messages)
            runs[s.name].append(m)
            if s.after is not None:
                s.after()
            print(f"  round {r + 1}: {s.name}: {m.messages_per_s:,.0f} msg/s, {m.server_us_per_message:.2f} us CPU/msg", flush=True)
    return {name: median_of(got) for name, got in runs.items()}


# 1. Requests ----------------------------------------------------------------------------


def requests_section(root: str, args: argparse.Namespace) -> None:
    noop = NoopServer()
    broker = Broker(os.path.join(root, "requests"), STORE_CONFIG + 'flush_disk_type = "ASYNC_FLUSH"\n')
    peer, why = start_redis(RedisInMemory(), root)
    try:
        status, reply = broker.request("PUT", "/v1/topics/bench", b'{"queues": 4}')
        assert status in (200, 201), reply[:200]
        body = "x" * BODY_BYTES
        path = "/v1/topics/bench/messages"
        single = json.dumps({"body": body, "queue_id": 1}).encode()
        batch = json.dumps({"messages": [{"body": body, "queue_id": 2}] * BATCH}).encode()
        pid = broker.proc.pid
        scenarios = [
            Scenario("plain-ASGI no-op GET", noop.port, noop.proc.pid, http_request("GET", "/")),
            Scenario("tidemq GET /healthz", broker.port, pid, http_request("GET", "/healthz")),
            Scenario("tidemq single JSON produce, 1 KiB", broker.port, pid, http_request("POST", path, single, "application/json")),
            Scenario(
                f"tidemq JSON batch {BATCH} x 1 KiB",
                broker.port,
                pid,
                http_request("POST", path, batch, "application/json"),
                messages=BATCH,
            ),
            Scenario(
                f"tidemq binary batch {BATCH} x 1 KiB",
                broker.port,
                pid,
                http_request("POST", path + "?queue_id=3", binary_batch(body.encode(), BATCH), BATCH_MEDIA_TYPE),
                messages=BATCH,
            ),
        ]
        if peer is not None:
            assert peer.proc is not None
            xadd = resp_command(b"XADD", b"bench", b"*", b"f", b"v" * BODY_BYTES)
            flush = lambda: redis_flush(peer.port)  # a small closure per scenario
            scenarios.append(Scenario("redis XADD 1 KiB", peer.port, peer.proc.pid, xadd, "resp", after=flush))
            scenarios.append(
                Scenario(f"redis XADD 1 KiB, {BATCH} pipelined", peer.port, peer.proc.pid, xadd * BATCH, "resp", BATCH, BATCH, flush)
            )
        ports = [str(noop.port), str(broker.port)] + ([str(peer.port)] if peer is not None else [])
        print(f"servers on ports {', '.join(ports)} (no-op, tidemq, redis)", flush=True)
        got = measure_rounds(scenarios, args.rounds, args.connections, args.seconds)
    finally:
        broker.stop()
        noop.stop()
        if peer is not None:
            peer.stop()
    requests_report(got, args, why)


def requests_report(got: dict[str, Measured], args: argparse.Namespace, why: str) -> None:
    """The requests table and its targets."""
    noop_us = got["plain-ASGI no-op GET"].server_us_per_request
    redis_one = got.get("redis XADD 1 KiB")
    redis_many = got.get(f"redis XADD 1 KiB, {BATCH} pipelined")
    print(
        f"\nRequests: bench/loadgen.c with {args.connections} connections for every row, {args.seconds:g} s per run, "
        f"{args.rounds} interleaved rounds, the median round by server CPU per request; tidemq ASYNC_FLUSH, Redis without persistence"
        + (f" ({why})" if why else "")
    )

    def versus(name: str, against: Measured | None, label: str, per: str = "message") -> str:
        m = got[name]
        parts = [f"{m.server_us_per_request / noop_us:.2f}x no-op CPU/req"]
        if against is not None:
            mine = m.server_us_per_message if per == "message" else m.server_us_per_request
            parts.append(f"{mine / against.server_us_per_message:.2f}x {label} CPU/msg")
        return "; ".join(parts)

    rows: list[tuple[str, Measured | None, str]] = [
        ("plain-ASGI no-op GET", got["plain-ASGI no-op GET"], "1.00x no-op CPU/req"),
        ("tidemq GET /healthz", got["tidemq GET /healthz"], versus("tidemq GET /healthz", None, "")),
        ("tidemq single JSON produce, 1 KiB", got["tidemq single JSON produce, 1 KiB"],
         versus("tidemq single JSON produce, 1 KiB", redis_one, "XADD")),
        (f"tidemq JSON batch {BATCH} x 1 KiB", got[f"tidemq JSON batch {BATCH} x 1 KiB"],
         versus(f"tidemq JSON batch {BATCH} x 1 KiB", redis_many, f"XADD x{BATCH} pipelined")),
        (f"tidemq binary batch {BATCH} x 1 KiB", got[f"tidemq binary batch {BATCH} x 1 KiB"],
         versus(f"tidemq binary batch {BATCH} x 1 KiB", redis_many, f"XADD x{BATCH} pipelined")),
        ("redis XADD 1 KiB", redis_one, ""),
        (f"redis XADD 1 KiB, {BATCH} pipelined", redis_many, ""),
    ]  # fmt: skip
    print_table(rows)
    produce = got["tidemq single JSON produce, 1 KiB"].server_us_per_request / noop_us
    print(f"target single JSON produce <= 2x the no-op's CPU per request: {produce:.2f}x, {'met' if produce <= 2.0 else 'NOT met'}")
    if redis_many is not None:
        for kind, most in (("JSON", 2.0), ("binary", 1.0)):
            ratio = got[f"tidemq {kind} batch {BATCH} x 1 KiB"].server_us_per_message / redis_many.server_us_per_message
            verdict = "met" if ratio <= most else "NOT met"
            print(f"target {kind} batch <= {most:g}x XADD x{BATCH} pipelined's CPU per message: {ratio:.2f}x, {verdict}")


# 3. Delivery ----------------------------------------------------------------------------


def stamped_body() -> str:
    """A 1 KiB body whose first STAMP_DIGITS bytes are now on CLOCK_MONOTONIC, in nanoseconds."""
    return f"{time.monotonic_ns():0{STAMP_DIGITS}d}".ljust(BODY_BYTES, "x")


def paced(rate: int, count: int, send: Callable[[], object]) -> None:
    interval, next_send = 1.0 / rate, time.monotonic()
    for _ in range(count):
        while time.monotonic() < next_send:
            time.sleep(max(0.0, next_send - time.monotonic() - 0.0005))
        send()
        next_send += interval


def tidemq_pull_consumer(port: int, topic: str, offset: int, count: int, deadline_s: float, out: Any) -> None:
    conn = WireConnection(port)
    held: list[float] = []
    end = time.monotonic() + deadline_s
    while len(held) < count and time.monotonic() < end:
        status, body = conn.http(http_request("GET", f"/v1/topics/{topic}/queues/0/messages?offset={offset}&max=32&wait_ms=1000"))
        assert status == 200, status
        reply = json.loads(body)
        now = time.monotonic_ns()
        held.extend((now - int(m["body"][:STAMP_DIGITS])) / 1e6 for m in reply["messages"])
        offset = reply["next_offset"]
    conn.close()
    out.put((held, []))


def tidemq_receive_consumer(port: int, topic: str, count: int, deadline_s: float, out: Any) -> None:
    conn = WireConnection(port)
    receive = http_request("POST", f"/v1/groups/lat/topics/{topic}/receive?max=32&wait_ms=1000&invisible_ms=60000")
    held: list[float] = []
    acked: list[float] = []
    end = time.monotonic() + deadline_s
    while len(acked) < count and time.monotonic() < end:
        status, body = conn.http(receive)
        assert status == 200, status
        reply = json.loads(body)
        now = time.monotonic_ns()
        stamps = [int(m["body"][:STAMP_DIGITS]) for m in reply["messages"]]
        if not stamps:
            continue
        held.extend((now - t) / 1e6 for t in stamps)
        handles = json.dumps({"receipt_handles": [m["receipt_handle"] for m in reply["messages"]]}).encode()
        status, _ = conn.http(http_request("POST", f"/v1/groups/lat/topics/{topic}/ack", handles, "application/json"))
        assert status == 200, status
        now = time.monotonic_ns()
        acked.extend((now - t) / 1e6 for t in stamps)
    conn.close()
    out.put((held, acked))


def redis_entries(reply: RespValue) -> list[tuple[bytes, bytes]]:
    """(entry id, field b's value) of an XREAD / XREADGROUP reply of one stream (None when it timed out)."""
    if reply is None:
        return []
    assert isinstance(reply, list) and isinstance(reply[0], list) and isinstance(reply[0][1], list), reply
    entries: list[tuple[bytes, bytes]] = []
    for entry in reply[0][1]:
        assert isinstance(entry, list) and isinstance(entry[0], bytes) and isinstance(entry[1], list), entry
        fields = entry[1]
        assert fields[0] == b"b" and isinstance(fields[1], bytes), fields
        entries.append((entry[0], fields[1]))
    return entries


def redis_consumer(port: int, stream: bytes, after: bytes, count: int, deadline_s: float, group: bool, out: Any) -> None:
    """XREAD BLOCK from entry id `after` on (or, `group`, XREADGROUP of group g's new entries, each batch acked)."""
    conn = WireConnection(port)
    held: list[float] = []
    acked: list[float] = []
    end = time.monotonic() + deadline_s
    last = after
    read_group = resp_command(b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"32", b"BLOCK", b"1000", b"STREAMS", stream, b">")
    while len(held) < count and time.monotonic() < end:
        if group:
            entries = redis_entries(conn.resp(read_group))
        else:
            entries = redis_entries(conn.resp(resp_command(b"XREAD", b"COUNT", b"32", b"BLOCK", b"1000", b"STREAMS", stream, last)))
        now = time.monotonic_ns()
        if not entries:
            continue
        stamps = [int(value[:STAMP_DIGITS]) for _, value in entries]
        held.extend((now - t) / 1e6 for t in stamps)
        last = entries[-1][0]
        if group:
            assert conn.resp(resp_command(b"XACK", stream, b"g", *(entry_id for entry_id, _ in entries))) == len(entries)
            now = time.monotonic_ns()
            acked.extend((now - t) / 1e6 for t in stamps)
    conn.close()
    out.put((held, acked))


@dataclass
class Latency:
    held: list[float]
    acked: list[float]
    server_cpu_s: float
    messages: int
    load: float

    @property
    def server_us_per_message(self) -> float:
        return self.server_cpu_s / max(1, self.messages) * 1e6

    def figure(self, values: list[float]) -> str:
        return f"{percentile(values, 0.5):.2f} / {percentile(values, 0.99):.2f}" if values else "-"

    def merged(self, other: Latency) -> Latency:
        """This and `other` (another round) as one sample: latencies pooled, CPU summed."""
        held, acked = sorted(self.held + other.held), sorted(self.acked + other.acked)
        return Latency(held, acked, self.server_cpu_s + other.server_cpu_s, self.messages + other.messages, other.load)


def run_delivery(consumer: Any, consumer_args: tuple[Any, ...], send: Callable[[], object], rate: int, count: int, pid: int) -> Latency:
    results: multiprocessing.Queue[tuple[list[float], list[float]]] = multiprocessing.Queue()
    proc = multiprocessing.Process(target=consumer, args=(*consumer_args, results))
    proc.start()
    time.sleep(0.5)  # the consumer's first read is held before the first send
    before = cpu_seconds(pid)
    paced(rate, count, send)
    held, acked = results.get(timeout=120)
    used = cpu_seconds(pid) - before
    proc.join(10)
    return Latency(sorted(held), sorted(acked), used, count, load_average())


class TidemqDelivery:
    """A broker (ASYNC_FLUSH) with a topic for held pulls and one for a group's receives."""

    def __init__(self, root: str) -> None:
        self.broker = Broker(os.path.join(root, "delivery"), STORE_CONFIG)
        for topic in ("lat", "latpop"):
            self.broker.request("PUT", f"/v1/topics/{topic}", b'{"queues": 1}')

    def measure(self, consumer: Any, consumer_args: tuple[Any, ...], topic: str, rate: int, count: int) -> Latency:
        conn = WireConnection(self.broker.port)  # a round's own: an idle keep-alive connection is closed between rounds
        path = f"/v1/topics/{topic}/messages"

        def send() -> None:
            body = json.dumps({"body": stamped_body(), "queue_id": 0}).encode()
            status, _ = conn.http(http_request("POST", path, body, "application/json"))
            assert status == 201, status

        try:
            return run_delivery(consumer, consumer_args, send, rate, count, self.broker.proc.pid)
        finally:
            conn.close()

    def pull(self, rate: int, count: int) -> Latency:
        status, reply = self.broker.request("GET", "/v1/topics/lat/queues/0/messages?offset=0&max=1")
        assert status == 200, status
        end = json.loads(reply)["max_offset"]  # the consumer waits past what earlier rounds sent
        return self.measure(tidemq_pull_consumer, (self.broker.port, "lat", end, count, 60.0), "lat", rate, count)

    def receive(self, rate: int, count: int) -> Latency:
        return self.measure(tidemq_receive_consumer, (self.broker.port, "latpop", count, 60.0), "latpop", rate, count)

    def close(self) -> None:
        self.broker.stop()


class RedisDelivery:
    """Redis (appendfsync everysec) with a stream for XREAD BLOCK and one with a group for XREADGROUP + XACK."""

    def __init__(self, peer: RedisPeer) -> None:
        assert peer.proc is not None
        self.peer, self.pid = peer, peer.proc.pid
        conn = WireConnection(peer.port)
        conn.resp(resp_command(b"XGROUP", b"CREATE", b"latg", b"g", b"$", b"MKSTREAM"))
        conn.close()

    def measure(self, stream: bytes, group: bool, rate: int, count: int) -> Latency:
        conn = WireConnection(self.peer.port)

        def send() -> None:
            assert isinstance(conn.resp(resp_command(b"XADD", stream, b"*", b"b", stamped_body().encode())), bytes)

        try:
            # The stream's last id now, as tidemq's pull starts at the queue's end offset: not `$`, which would skip what
            # is sent before the consumer's first XREAD when its process starts late.
            newest = conn.resp(resp_command(b"XREVRANGE", stream, b"+", b"-", b"COUNT", b"1"))
            after = newest[0][0] if isinstance(newest, list) and newest and isinstance(newest[0], list) else b"0-0"
            assert isinstance(after, bytes), newest
            return run_delivery(redis_consumer, (self.peer.port, stream, after, count, 60.0, group), send, rate, count, self.pid)
        finally:
            conn.close()

    def pull(self, rate: int, count: int) -> Latency:
        return self.measure(b"lat", False, rate, count)

    def receive(self, rate: int, count: int) -> Latency:
        return self.measure(b"latg", True, rate, count)

    def close(self) -> None:
        self.peer.stop()


def delivery_rounds(root: str, args: argparse.Namespace, count: int) -> tuple[dict[str, Latency], str]:
    """`args.rounds` rounds of the four measurements, tidemq's and Redis's interleaved (every other round Redis
    first), so that both sides meet the same drift of the machine's load; each figure pools its rounds."""
    tidemq = TidemqDelivery(root)
    peer, why = start_redis(RedisPeer("everysec"), root)
    redis = RedisDelivery(peer) if peer is not None else None
    print(f"delivery servers on ports {tidemq.broker.port} (tidemq), {peer.port if peer is not None else '-'} (redis)", flush=True)
    got: dict[str, Latency] = {}
    try:
        for r in range(args.rounds):
            sides: list[tuple[str, TidemqDelivery | RedisDelivery]] = [("tidemq", tidemq)]
            if redis is not None:
                sides.insert(r % 2, ("redis", redis))
            for name, side in sides:
                for kind, measure in (("pull", side.pull), ("receive", side.receive)):
                    one = measure(args.rate, count)
                    key = f"{name} {kind}"
                    got[key] = got[key].merged(one) if key in got else one
    finally:
        tidemq.close()
        if redis is not None:
            redis.close()
    return got, why


def delivery_section(root: str, args: argparse.Namespace) -> None:
    count = int(args.rate * args.seconds)
    got, why = delivery_rounds(root, args, count)
    pull, receive = got["tidemq pull"], got["tidemq receive"]
    read, group = got.get("redis pull"), got.get("redis receive")
    print(
        f"\nDelivery of 1 KiB messages at {args.rate}/s, {args.rounds} interleaved rounds of {args.seconds:g} s: a Python producer "
        "and a Python consumer process (one socket client, bench/wire_client.py, for both); p50 / p99 in ms from the send's start, "
        "the rounds pooled" + (f" (redis: {why})" if why else "")
    )
    print("| figure | tidemq p50 / p99 ms | redis p50 / p99 ms | p50 ratio | p99 ratio | server CPU us/msg tidemq / redis | load |")
    print("|---|---:|---:|---:|---:|---:|---:|")

    def line(name: str, ours: Latency, ours_values: list[float], theirs: Latency | None, theirs_values: list[float]) -> None:
        r50 = ratio(percentile(ours_values, 0.5), percentile(theirs_values, 0.5)) if theirs else "-"
        r99 = ratio(percentile(ours_values, 0.99), percentile(theirs_values, 0.99)) if theirs else "-"
        cpu = (
            f"{ours.server_us_per_message:.1f} / {theirs.server_us_per_message:.1f}" if theirs else f"{ours.server_us_per_message:.1f} / -"
        )
        print(
            f"| {name} | {ours.figure(ours_values)} | {theirs.figure(theirs_values) if theirs else '-'} | {r50} | {r99} | {cpu} | {ours.load:.2f} |"
        )

    line("held pull / XREAD BLOCK: message held", pull, pull.held, read, read.held if read else [])
    line("held receive / XREADGROUP BLOCK: message held", receive, receive.held, group, group.held if group else [])
    line("held receive + ack / XREADGROUP + XACK: ack answered", receive, receive.acked, group, group.acked if group else [])
    sent = count * args.rounds
    print(f"messages measured: pull {len(pull.held)}, receive {len(receive.held)}, acked {len(receive.acked)} of {sent}")
    if read is not None:
        p99 = percentile(pull.held, 0.99) / percentile(read.held, 0.99)
        print(f"target delivery p99 <= 2x XREAD BLOCK's: {p99:.2f}x, {'met' if p99 <= 2.0 else 'NOT met'}")
    p50 = percentile(receive.acked, 0.5)
    print(f"target held receive + ack p50 <= 1.5 ms: {p50:.2f} ms, {'met' if p50 <= 1.5 else 'NOT met'}")


# 4. Batches from Python clients ------------------------------------------------------------


def timed_sends(send: Callable[[], int], seconds: float, start: Any, out: Any) -> None:
    """A client process's run: one `send` to warm up, then, from `start`, sends for `seconds`;
    (messages sent, CPU seconds used) go to `out`."""
    send()
    start.wait()
    sent, used, stop_at = 0, time.process_time(), time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        sent += send()
    out.put((sent, time.process_time() - used))


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


def tidemq_py_client(port: int, seconds: float, start: Any, out: Any) -> None:
    """Client process: httpx posts of a binary batch of BATCH messages, built anew (fresh UNIQ_KEYs) for each request."""
    import httpx

    body = b"x" * BODY_BYTES
    headers = {"content-type": BATCH_MEDIA_TYPE}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:

        def send() -> int:
            reply = client.post("/v1/topics/batch/messages", content=binary_batch(body, BATCH), headers=headers)
            if reply.status_code != 201:
                raise RuntimeError(f"produce answered {reply.status_code}: {reply.text[:200]}")
            return int(reply.json()["count"])

        timed_sends(send, seconds, start, out)


def client_processes(target: Callable[[int, float, Any, Any], None], port: int, count: int, seconds: float, server_pid: int) -> Measured:
    """`count` client processes, started together once each has sent one batch; their CPU and the server's meanwhile."""
    start = multiprocessing.Barrier(count + 1)
    out: multiprocessing.Queue[tuple[int, float]] = multiprocessing.Queue()
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
    return Measured(int(sent), 1, elapsed, cpu_seconds(server_pid) - server, client, 0, load_average())


def batch_section(root: str, args: argparse.Namespace) -> None:
    peer, why = start_redis(RedisInMemory(), root)
    broker = Broker(os.path.join(root, "batch"), STORE_CONFIG + 'flush_disk_type = "ASYNC_FLUSH"\n')
    rows: list[tuple[str, Measured | None, str]] = []
    try:
        status, reply = broker.request("PUT", "/v1/topics/batch", b'{"queues": 4}')
        assert status in (200, 201), reply[:200]
        for count in (1, args.py_clients):
            theirs = None
            if peer is not None and peer.proc is not None:
                theirs = client_processes(redis_py_client, peer.port, count, args.seconds, peer.proc.pid)
                redis_flush(peer.port)
            ours = client_processes(tidemq_py_client, broker.port, count, args.seconds, broker.proc.pid)
            versus = "" if theirs is None else f"rate {ratio(ours.messages_per_s, theirs.messages_per_s)} of redis-py"
            rows.append((f"httpx binary batch {BATCH} x 1 KiB, {count} client process(es)", ours, versus))
            rows.append((f"redis-py pipeline of {BATCH} XADD 1 KiB, {count} client process(es)", theirs, ""))
    finally:
        broker.stop()
        if peer is not None:
            peer.stop()
    print(f"\nBatches from Python client processes (httpx against redis-py), {BATCH} x 1 KiB per request" + (f" ({why})" if why else ""))
    print_table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections to run, of {','.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="2 s per measurement (delivery: 2 s a round at the full rate)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the requests, durable and delivery sections")
    parser.add_argument("--rate", type=int, default=1_000, help="messages per second of the delivery test")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--producers", type=int, default=64, help="concurrent producers of the durable-put test")
    parser.add_argument("--connections", type=int, default=32, help="connections of the requests section (both sides)")
    parser.add_argument("--py-clients", type=int, default=4, help="client processes of the many-client Python rows")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    if not sections <= set(SECTIONS):
        parser.error(f"--only takes {','.join(SECTIONS)}, not {args.only}")
    if args.quick:
        args.seconds = min(args.seconds, 2.0)
    print(
        f"load average {os.getloadavg()}; {args.seconds:g} s per measurement; bodies of {BODY_BYTES} B; {os.cpu_count()} cores", flush=True
    )
    with tempfile.TemporaryDirectory(prefix="tidemq-vs-redis-") as root:
        for name, section in (("requests", requests_section), ("durable", durable_section), ("delivery", delivery_section),
                              ("batch", batch_section)):  # fmt: skip
            if name in sections:
                section(root, args)
                clear_section(root)
    print(f"load average at the end {os.getloadavg()}")


def clear_section(root: str) -> None:
    """Remove what a section's servers stored (they are stopped) and wait for the disk: the next section starts with
    neither the gigabytes the batch rows wrote in the page cache nor their write-back under way, on both sides."""
    for entry in os.listdir(root):
        shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
    os.sync()


if __name__ == "__main__":
    main()
