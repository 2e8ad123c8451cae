"""Memory of a held request: tidemq's held long poll against Redis's blocked `XREAD BLOCK`.

Both servers run in the same round and are driven by the same load generator: N raw asyncio
connections from this process, each sending one request that the server holds (a pull with
`wait_ms` on an empty queue; `XREAD BLOCK` on an empty stream), spread over Q queues or streams.
The server's RSS is read from /proc before the first request and again once every request is
held (the server has read each one: tidemq's `/metrics` counts held pulls, Redis's INFO counts
blocked clients); the difference over N is the memory a held request costs. The queues are
warmed first (one answered pull per queue) so that what a queue itself costs (its consume-queue
objects) is in the baseline, not charged to the polls. Kernel socket buffers are in neither RSS.

Usage: python bench/held_memory_bench.py [--polls N ...] [--queues Q]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.held_polls_bench import CONFIG, rss_mb
from bench.http_bench import Broker
from bench.versus_common import RedisInMemory, start_redis

WAIT_MS = 120_000
HELD_TIMEOUT_S = 120.0


async def open_held(port: int, requests: list[bytes]) -> list[tuple[asyncio.StreamWriter, asyncio.Task[bytes]]]:
    """One connection per request, each request sent and left unanswered; each with a task reading its answer."""
    connections = []
    for request in requests:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        connections.append((writer, asyncio.create_task(reader.read(300))))
    for writer, _ in connections:
        await writer.drain()
    return connections


def answered_early(connections: list[tuple[asyncio.StreamWriter, asyncio.Task[bytes]]]) -> str:
    """What the server answered to a request it should have held ("" when none was answered)."""
    for _, answer in connections:
        if answer.done():
            return answer.result().decode(errors="replace") or "(closed)"
    return ""


async def hold_and_measure(port: int, pid: int, requests: list[bytes], held_count: Callable[[], int]) -> tuple[float, float]:
    """RSS (MB) before the requests and once the server holds all of them."""
    before = rss_mb(pid)
    connections = await open_held(port, requests)
    deadline = time.monotonic() + HELD_TIMEOUT_S
    while held_count() < len(requests):
        early = answered_early(connections)
        if early or time.monotonic() > deadline:
            raise RuntimeError(f"{held_count()} of {len(requests)} requests held; a request was answered: {early!r}")
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.5)  # the last reads' buffers settle
    after = rss_mb(pid)
    for writer, answer in connections:
        answer.cancel()
        writer.close()
    return before, after


def tidemq_round(polls: int, queues: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="tidemq-heldmem-") as root:
        broker = Broker(root, CONFIG.format(held=polls + 10, connections=polls + 100, per_topic=max(queues, 8)))
        try:
            status, _ = broker.request("PUT", "/v1/topics/held", f'{{"queues": {queues}}}'.encode())
            assert status in (200, 201), status
            for queue in range(queues):  # warm: each queue's objects are in the baseline
                assert broker.request("GET", f"/v1/topics/held/queues/{queue}/messages?offset=0")[0] == 200

            def held() -> int:
                _, text = broker.request("GET", "/metrics")
                match = re.search(rb"^tidemq_held_pulls (\d+)", text, re.MULTILINE)
                return int(match.group(1)) if match else 0

            requests = [
                f"GET /v1/topics/held/queues/{i % queues}/messages?offset=0&wait_ms={WAIT_MS} HTTP/1.1\r\nhost: b\r\n\r\n".encode()
                for i in range(polls)
            ]
            return asyncio.run(hold_and_measure(broker.port, broker.proc.pid, requests, held))
        finally:
            broker.stop()


class RedisManyClients(RedisInMemory):
    """Redis in memory with room for `clients` connections (its default maxclients is 10,000)."""

    def __init__(self, clients: int) -> None:
        super().__init__()
        self.clients = clients

    def argv(self, data_dir: Path) -> list[str]:
        return [*super().argv(data_dir), "--maxclients", str(self.clients)]


def redis_round(polls: int, queues: int) -> tuple[float, float] | str:
    import redis

    with tempfile.TemporaryDirectory(prefix="tidemq-heldmem-redis-") as root:
        peer, why = start_redis(RedisManyClients(polls + 100), root)
        if peer is None:
            return why
        try:
            assert peer.proc is not None
            client = redis.Redis(port=peer.port)
            for queue in range(queues):  # each stream exists and is empty: XREAD with $ blocks
                client.xadd(f"held{queue}", {"b": b"x"})
                client.xtrim(f"held{queue}", maxlen=0)
            requests = []
            for i in range(polls):
                key = f"held{i % queues}".encode()
                args = [b"XREAD", b"BLOCK", str(WAIT_MS).encode(), b"STREAMS", key, b"$"]
                requests.append(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))

            def held() -> int:
                return int(client.info("clients")["blocked_clients"])

            result = asyncio.run(hold_and_measure(peer.port, peer.proc.pid, requests, held))
            client.close()
            return result
        finally:
            peer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, nargs="+", default=[1_000, 10_000], help="held requests per round")
    parser.add_argument("--queues", type=int, default=10, help="queues (streams) the requests are spread over")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard != resource.RLIM_INFINITY and hard < max(args.polls) + 200:
        sys.exit(f"needs {max(args.polls) + 200} descriptors, the hard limit is {hard}: raise it (ulimit -Hn) and rerun")
    print(f"load average {os.getloadavg()[0]:.2f}; {args.queues} queues; {Path(sys.executable).name}")
    print(
        "| held requests | tidemq RSS before → held | tidemq per held poll | redis RSS before → held | redis per XREAD BLOCK | tidemq / redis |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for polls in args.polls:
        t_before, t_after = tidemq_round(polls, args.queues)
        t_kb = (t_after - t_before) * 1024 / polls
        peer = redis_round(polls, args.queues)
        if isinstance(peer, str):
            print(f"| {polls:,} | {t_before:.0f} → {t_after:.0f} MB | {t_kb:.1f} KB | redis not run: {peer} | | |", flush=True)
            continue
        r_before, r_after = peer
        r_kb = (r_after - r_before) * 1024 / polls
        print(
            f"| {polls:,} | {t_before:.0f} → {t_after:.0f} MB | {t_kb:.1f} KB | {r_before:.1f} → {r_after:.1f} MB "
            f"| {r_kb:.1f} KB | {t_kb / r_kb if r_kb > 0 else float('nan'):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
