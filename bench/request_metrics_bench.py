"""What the broker's ASGI work costs per request beside a no-op ASGI app, and what the access log adds, in process.

The broker's real ASGI entry (app.hot_routes: counting, the query, the gates and the hot routes in
one callable) is built over a temporary store (loaded and started); requests are driven straight
into it, without sockets or uvicorn, so the figures are the ASGI work alone. Three ways in,
alternated round by round so that a shared machine's drift hits all of them alike:
1. no-op: bench/noop_asgi.py's bare ASGI callable (the constant reply /healthz sends);
2. counted: the broker's entry (every request counted in app.http_requests, the default);
3. counted + access log: the same with `--access-log`, its lines formatted as JSON into /dev/null.
Requests: GET /healthz and a single-message JSON produce (the cheapest store request).

Usage: python bench/request_metrics_bench.py [--quick] [--rounds N] [--requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from app.hot_routes import HotRoutes  # noqa: E402
from app.logs import ACCESS_LOGGER, JsonFormatter  # noqa: E402
from app.server import create_app  # noqa: E402
from app.settings import build_settings  # noqa: E402
from bench.noop_asgi import app as noop_app  # noqa: E402

ASGI = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
BODY = b'{"body": "' + b"x" * 1000 + b'", "queue_id": 0}'


def scope_of(method: str, path: str, body: bytes) -> dict[str, Any]:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())] if body else []
    return {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"", "headers": headers,
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080), "scheme": "http", "http_version": "1.1",
            "root_path": "", "asgi": {"version": "3.0"}}  # fmt: skip


async def per_request_ns(app: ASGI, template: dict[str, Any], body: bytes, count: int) -> float:
    """Mean nanoseconds per request over `count` requests; every reply must be 2xx."""
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    start = time.perf_counter_ns()
    for _ in range(count):
        await app(dict(template), receive, send)
    elapsed = time.perf_counter_ns() - start
    assert all(200 <= s < 300 for s in statuses) and len(statuses) == count, statuses[:5]
    return elapsed / count


async def measure(rounds: int, count: int, store_dir: str) -> dict[str, dict[str, list[float]]]:
    settings = build_settings(None, {"store_dir": store_dir, "log_level": "warning"})
    app = create_app(settings)
    broker = app.state.broker
    await broker.start()
    try:
        await broker.run(broker.store.create_or_update_topic, "bench", 4, "rw")  # topics are created explicitly
        counted: HotRoutes = app.state.entry
        logged = copy.copy(counted)
        logged.log_requests = True
        ways: dict[str, ASGI] = {"no-op": noop_app, "counted": counted, "counted + access log": logged}
        requests = {
            "GET /healthz": (scope_of("GET", "/healthz", b""), b""),
            "produce, single (JSON)": (scope_of("POST", "/v1/topics/bench/messages", BODY), BODY),
        }
        figures: dict[str, dict[str, list[float]]] = {r: {w: [] for w in ways} for r in requests}
        for template, body in requests.values():  # warm-up: the code paths
            for app_way in ways.values():
                await per_request_ns(app_way, template, body, count // 10 or 1)
        for _ in range(rounds):
            for name, (template, body) in requests.items():
                for way, app_way in ways.items():
                    figures[name][way].append(await per_request_ns(app_way, template, body, count))
        return figures
    finally:
        await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 2,000 requests")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (each runs every way once per request kind)")
    parser.add_argument("--requests", type=int, default=20_000, help="requests per way per round")
    args = parser.parse_args()
    rounds, count = (3, 2_000) if args.quick else (args.rounds, args.requests)
    access = logging.getLogger(ACCESS_LOGGER)
    sink = logging.StreamHandler(open(os.devnull, "w"))  # open for the whole run
    sink.setFormatter(JsonFormatter())
    access.addHandler(sink)
    access.setLevel(logging.INFO)
    access.propagate = False
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tidemq-request-metrics-") as store_dir:
        figures = asyncio.run(measure(rounds, count, store_dir))
    print(f"tidemq ASGI work per request beside a no-op ASGI app, in process ({platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()});"
          f" {rounds} rounds x {count:,} requests per way; load average {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")  # fmt: skip
    print()
    print("| request | way | median us/request | added us (median) | ratio to the no-op (median of rounds) |")
    print("|---|---|---:|---:|---:|")
    for name, ways in figures.items():
        bare = ways["no-op"]
        for way, values in ways.items():
            ratios = [v / b for v, b in zip(values, bare, strict=True)]
            added = statistics.median(v - b for v, b in zip(values, bare, strict=True)) / 1000
            print(f"| {name} | {way} | {statistics.median(values) / 1000:.2f} | {added:.2f} | {statistics.median(ratios):.3f} |")


if __name__ == "__main__":
    main()
