"""Push delivery throughput: the broker's push subscription against a consumer that forwards.

One broker process (`python -m app serve`, ASYNC_FLUSH, a temporary store, push to 127.0.0.1
allowed) holds a topic pre-filled with `--messages` messages of 1 KiB. One receiver (an asyncio
HTTP/1.1 server in this process, keep-alive, answering 204 at once and counting bodies) gets them
two ways, each until every message arrived once:

1. forwarding consumer (baseline): what a user does without push: `--in-flight` asyncio tasks
   (httpx, one client to the broker, one to the receiver) each loop receive (max 32) -> POST every
   message to the receiver -> ack the handles;
2. push: a push subscription of the topic to the receiver with max_in_flight = `--in-flight`; the
   broker receives, POSTs (signed) and acks by itself.

Each is reported in messages per second with the broker's CPU per message (/proc/PID/stat utime +
stime around the phase) and this process's CPU per message (the receiver, plus the consumer in
the baseline), and push as a ratio to the baseline measured in the same run: the machine is shared.

Usage: python bench/push_bench.py [--quick] [--messages N] [--in-flight K]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

import httpx
import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.http_bench import Broker
from bench.load_generator import cpu_seconds

BODY_BYTES = 1024
RECEIVE_MAX = 32
INVISIBLE_MS = 60_000
CONFIG = """
[broker]
push_allowed_hosts = ["127.0.0.1"]
push_max_in_flight = 256
push_idle_poll_ms = 20
[store]
mapped_file_size_commit_log_bytes = 268435456
"""


class Receiver:
    """A minimal keep-alive HTTP/1.1 server on loopback that answers every POST 204 and counts its bodies."""

    def __init__(self) -> None:
        self.bodies: set[bytes] = set()
        self.requests = 0
        self.want = 0
        self.done = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        started = threading.Event()
        threading.Thread(target=self._run, args=(started,), daemon=True).start()
        started.wait(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        started.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length)
                self.requests += 1
                self.bodies.add(body)
                if len(self.bodies) >= self.want:
                    self.done.set()
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def expect(self, want: int) -> None:
        self.bodies = set()
        self.requests = 0
        self.want = want
        self.done.clear()


def fill(broker: Broker, topic: str, messages: int) -> None:
    assert broker.request("PUT", f"/v1/topics/{topic}", orjson.dumps({"queues": 8}))[0] == 201
    for first in range(0, messages, 100):
        batch = [{"body": f"{i:08d}".ljust(BODY_BYTES, "x"), "queue_id": i % 8} for i in range(first, min(messages, first + 100))]
        status, reply = broker.request("POST", f"/v1/topics/{topic}/messages", orjson.dumps({"messages": batch}))
        assert status == 201, reply


async def forward(broker_url: str, receiver_url: str, group: str, topic: str, in_flight: int, receiver: Receiver) -> None:
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(base_url=broker_url, limits=limits, timeout=30) as b, httpx.AsyncClient(limits=limits, timeout=30) as r:

        async def worker() -> None:
            while not receiver.done.is_set():
                got = (await b.post(f"/v1/groups/{group}/topics/{topic}/receive", params={"max": RECEIVE_MAX, "invisible_ms": INVISIBLE_MS,
                                                                                          "wait_ms": 200})).json()["messages"]  # fmt: skip
                if not got:
                    continue
                for m in got:
                    assert (await r.post(receiver_url, content=m["body"].encode())).status_code == 204
                acked = await b.post(f"/v1/groups/{group}/topics/{topic}/ack", json={"receipt_handles": [m["receipt_handle"] for m in got]})
                assert acked.status_code == 200

        await asyncio.gather(*(worker() for _ in range(in_flight)))


def phase(broker: Broker, receiver: Receiver, messages: int, run: Callable[[], object]) -> tuple[float, float, float]:
    """(messages/s, broker CPU µs per message, this process's CPU µs per message) of one phase."""
    receiver.expect(messages)
    cpu0, own0, t0 = cpu_seconds(broker.proc.pid), time.process_time(), time.perf_counter()
    run()
    assert receiver.done.wait(600), f"only {len(receiver.bodies)} of {messages} arrived"
    elapsed = time.perf_counter() - t0
    cpu, own = cpu_seconds(broker.proc.pid) - cpu0, time.process_time() - own0
    return messages / elapsed, cpu / messages * 1e6, own / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="2,000 messages")
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--in-flight", dest="in_flight", type=int, default=32)
    args = parser.parse_args()
    messages = 2_000 if args.quick else args.messages
    root = tempfile.mkdtemp(prefix="tidemq-push-bench-")
    broker = Broker(root, CONFIG)
    receiver = Receiver()
    url = f"http://127.0.0.1:{receiver.port}/hook"
    try:
        print(f"load average {os.getloadavg()[0]:.1f}; {messages} messages of {BODY_BYTES} B, {args.in_flight} in flight", flush=True)
        topic_a, topic_b = "fwd-" + uuid.uuid4().hex[:6], "push-" + uuid.uuid4().hex[:6]
        fill(broker, topic_a, messages)
        fill(broker, topic_b, messages)
        base = phase(broker, receiver, messages, lambda: asyncio.run(forward(f"http://127.0.0.1:{broker.port}", url, "fwd", topic_a,
                                                                              args.in_flight, receiver)))  # fmt: skip
        sub = {"topic": topic_b, "url": url, "secret": "bench-secret-0123456789", "max_in_flight": args.in_flight}
        push = phase(broker, receiver, messages, lambda: broker.request("PUT", "/v1/groups/pushed/push", orjson.dumps(sub)))
        print("| way | messages/s | broker CPU µs/msg | bench process CPU µs/msg | ratio to forwarding |")
        print("|---|---:|---:|---:|---:|")
        print(f"| forwarding consumer (receive, POST, ack) | {base[0]:,.0f} | {base[1]:.0f} | {base[2]:.0f} | 1.00 |")
        print(f"| push subscription | {push[0]:,.0f} | {push[1]:.0f} | {push[2]:.0f} | {push[0] / base[0]:.2f} |")
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
