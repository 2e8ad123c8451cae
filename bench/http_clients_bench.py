"""Which HTTP library should tidemq's Python client sit on? Single-message produce with 8 calls in
flight against a real broker, one library after another, in the same run.

    .venv/bin/python bench/http_clients_bench.py [--quick] [--messages N] [--rounds R]

The broker (`python -m app serve --flush async`, bench/compare_peers.py's TidemqPeer) runs in its own
process on loopback; every candidate sends the same raw 128-byte `application/octet-stream`
produces to queue 0 of one topic, on keep-alive connections opened before the clock starts:

- httpx.AsyncClient, aiohttp.ClientSession: 8 asyncio tasks sharing one pooled client;
- urllib3.PoolManager, requests.Session, http.client: 8 threads (one connection each);
- tidemq.AsyncClient (asyncio Protocol + httptools), on asyncio's loop and on uvloop's: 8 tasks;
- tidemq.Client (sockets + httptools): 8 threads sharing one client.

The candidates take turns round by round so a change in the machine's load touches them all; the
figure is each one's median over the rounds, also as a ratio to httpx's, with the CPU time per
produce spent in this process (the client) and in the broker's process over the same rounds: when
the broker's is near a full core per second, the broker, not the client, sets the rate. A
candidate whose library is not installed is reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.compare_peers import TidemqPeer  # noqa: E402
from bench.load_generator import cpu_seconds  # noqa: E402
from tidemq import AsyncClient, Client  # noqa: E402

IN_FLIGHT = 8
BODY = b"m" * 128
TOPIC = "http-clients"
PATH = f"/v1/topics/{TOPIC}/messages?queue_id=0"
HEADERS = {"content-type": "application/octet-stream"}
TIMEOUT_S = 30.0

Runner = Callable[[str, int], float]  # (base URL, messages) -> seconds taken


def _threads(count: int, make_sender: Callable[[], Callable[[], None]], close: Callable[[], None] | None = None) -> float:
    """`count` messages from IN_FLIGHT threads; each thread builds its sender (and connection) first."""
    left = [count]
    lock = threading.Lock()
    ready = threading.Barrier(IN_FLIGHT + 1)
    errors: list[BaseException] = []

    def work() -> None:
        send = make_sender()
        send()  # opens the connection before the clock starts
        ready.wait()
        try:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                send()
        except BaseException as e:  # reported after the run
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(IN_FLIGHT)]
    for t in threads:
        t.start()
    ready.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    if close is not None:
        close()
    if errors:
        raise errors[0]
    return seconds


async def _tasks(count: int, send: Callable[[], Awaitable[None]]) -> float:
    await asyncio.gather(*(send() for _ in range(IN_FLIGHT)))  # open the pooled connections
    left = count

    async def work() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await send()

    started = time.perf_counter()
    await asyncio.gather(*(work() for _ in range(IN_FLIGHT)))
    return time.perf_counter() - started


def run_httpx(base: str, count: int) -> float:
    import httpx

    async def main() -> float:
        limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=TIMEOUT_S) as c:

            async def send() -> None:
                (await c.post(PATH, content=BODY, headers=HEADERS)).raise_for_status()

            return await _tasks(count, send)

    return asyncio.run(main())


def run_aiohttp(base: str, count: int) -> float:
    import aiohttp

    async def main() -> float:
        connector = aiohttp.TCPConnector(limit=IN_FLIGHT)
        async with aiohttp.ClientSession(base, connector=connector, timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as s:

            async def send() -> None:
                async with s.post(PATH, data=BODY, headers=HEADERS) as r:
                    r.raise_for_status()
                    await r.read()

            return await _tasks(count, send)

    return asyncio.run(main())


def run_urllib3(base: str, count: int) -> float:
    import urllib3

    pool = urllib3.PoolManager(maxsize=IN_FLIGHT, block=True, timeout=TIMEOUT_S)

    def sender() -> Callable[[], None]:
        def send() -> None:
            r = pool.request("POST", base + PATH, body=BODY, headers=HEADERS)
            assert r.status == 201, r.status

        return send

    return _threads(count, sender, pool.clear)


def run_requests(base: str, count: int) -> float:
    import requests

    def sender() -> Callable[[], None]:
        session = requests.Session()

        def send() -> None:
            session.post(base + PATH, data=BODY, headers=HEADERS, timeout=TIMEOUT_S).raise_for_status()

        return send

    return _threads(count, sender)


def run_http_client(base: str, count: int) -> float:
    host, port = base.removeprefix("http://").split(":")

    def sender() -> Callable[[], None]:
        conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)

        def send() -> None:
            conn.request("POST", PATH, body=BODY, headers=HEADERS)
            r = conn.getresponse()
            r.read()
            assert r.status == 201, r.status

        return send

    return _threads(count, sender)


def _tidemq_async(base: str, count: int) -> Coroutine[Any, Any, float]:
    async def main() -> float:
        async with AsyncClient(base, max_connections=IN_FLIGHT) as c:

            async def send() -> None:
                await c.produce(TOPIC, BODY, queue_id=0)

            return await _tasks(count, send)

    return main()


def run_tidemq_async(base: str, count: int) -> float:
    return asyncio.run(_tidemq_async(base, count))


def run_tidemq_async_uvloop(base: str, count: int) -> float:
    import uvloop

    return uvloop.run(_tidemq_async(base, count))


def run_tidemq_sync(base: str, count: int) -> float:
    client = Client(base, max_connections=IN_FLIGHT)

    def sender() -> Callable[[], None]:
        return lambda: None if client.produce(TOPIC, BODY, queue_id=0) else None

    return _threads(count, sender, client.close)


CANDIDATES: dict[str, tuple[str, Runner]] = {
    "httpx": ("httpx", run_httpx),
    "aiohttp": ("aiohttp", run_aiohttp),
    "urllib3 (8 threads)": ("urllib3", run_urllib3),
    "requests (8 threads)": ("requests", run_requests),
    "http.client (8 threads)": ("http.client", run_http_client),
    "tidemq.AsyncClient (asyncio + httptools)": ("httptools", run_tidemq_async),
    "tidemq.AsyncClient on uvloop": ("uvloop", run_tidemq_async_uvloop),
    "tidemq.Client (8 threads, sockets + httptools)": ("httptools", run_tidemq_sync),
}


def available(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


class Figures:
    def __init__(self, names: list[str]) -> None:
        self.rates: dict[str, list[float]] = {name: [] for name in names}
        self.client_cpu_s: dict[str, float] = dict.fromkeys(names, 0.0)
        self.broker_cpu_s: dict[str, float] = dict.fromkeys(names, 0.0)
        self.sent: dict[str, int] = dict.fromkeys(names, 0)


def measure(base: str, broker_pid: int, messages: int, rounds: int) -> Figures:
    with Client(base) as c:
        c.create_topic(TOPIC, 1)
    figures = Figures([name for name, (module, _) in CANDIDATES.items() if available(module)])
    for r in range(rounds):
        for name in figures.rates:
            client_before, broker_before = time.process_time(), cpu_seconds(broker_pid)
            seconds = CANDIDATES[name][1](base, messages)
            figures.client_cpu_s[name] += time.process_time() - client_before
            figures.broker_cpu_s[name] += cpu_seconds(broker_pid) - broker_before
            figures.sent[name] += messages
            figures.rates[name].append(messages / seconds)
            print(f"round {r + 1}: {name}: {messages / seconds:,.0f} msg/s", file=sys.stderr, flush=True)
    return figures


def report(figures: Figures, messages: int, rounds: int) -> str:
    rates = figures.rates
    baseline = statistics.median(rates["httpx"]) if rates.get("httpx") else None
    lines = [
        f"Single produce, 128 B, {IN_FLIGHT} in flight, {messages:,} messages x {rounds} rounds (median):",
        "",
        "| client | produces/s | vs httpx | client CPU us/produce | broker CPU us/produce |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, values in sorted(rates.items(), key=lambda kv: -statistics.median(kv[1])):
        median = statistics.median(values)
        ratio = f"{median / baseline:.2f}x" if baseline else "n/a"
        client_us = figures.client_cpu_s[name] / figures.sent[name] * 1e6
        broker_us = figures.broker_cpu_s[name] / figures.sent[name] * 1e6
        lines.append(f"| {name} | {median:,.0f} | {ratio} | {client_us:,.0f} | {broker_us:,.0f} |")
    for name, (module, _) in CANDIDATES.items():
        if name not in rates:
            lines.append(f"| {name} | skipped: {module} is not installed | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few hundred messages, one round: checks the harness only")
    parser.add_argument("--messages", type=int, default=5000, help="messages per candidate per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    messages, rounds = (300, 1) if args.quick else (args.messages, args.rounds)
    peer = TidemqPeer("async")
    with tempfile.TemporaryDirectory(prefix="tidemq-http-clients-") as tmp, peer.running(Path(tmp)):
        assert peer.proc is not None
        figures = measure(f"http://127.0.0.1:{peer.port}", peer.proc.pid, messages, rounds)
    print(report(figures, messages, rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
