"""HTTP front end benchmark: request rates and server CPU per request against a no-op, and long-poll delivery latency.

One broker process (`python -m app serve`, uvicorn + uvloop + httptools) over a temporary
store, beside a plain-ASGI no-op server (bench/noop_asgi.py: a bare ASGI callable under the same
uvicorn), measured in one run on one machine; every row gives the server's CPU per request and per
message (the process CPU clock around the wrk run) and the load average at its end, and its CPU ratio to
the no-op's, which is what the targets are judged by:
0. GET on the plain-ASGI no-op: the floor of a request through uvicorn;
1. GET /healthz: the broker's no-op, answered by its ASGI entry in front of FastAPI (app.hot_routes);
2. single-message produce (JSON, 1 KiB body);
3. 100-message JSON batch produce (1 KiB bodies), and the same batch in the binary encoding
   (application/x-tidemq-batch, each message with its UNIQ_KEY as a client sets it);
4. raw-body produce (application/octet-stream, 1 KiB);
5. catch-up pulls of 1 KiB messages, JSON and the batch format (application/x-tidemq-batch);
6. produce -> long-poll delivery latency p50/p99 at a fixed rate.

Rates (1-5) come from wrk (installed with apt-get when missing and possible, else those rows
are skipped with a line saying so); every rate is also given as a ratio to the no-op ceiling
measured in the same run, because the machine is shared and absolute numbers drift.

Usage: python bench/http_bench.py [--quick] [--seconds S] [--connections N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.load_generator import cpu_seconds  # noqa: E402
from bench.noop_asgi import NoopServer  # noqa: E402

BODY_BYTES = 1024
READY_TIMEOUT_S = 60  # longest a broker may take to answer /readyz 200 after its start
STAMP_DIGITS = 20  # the send time at the head of a delivery body, zero-padded nanoseconds
BATCH = 100
TOPIC = "bench"
# Messages in the queue the catch-up pulls read (wrapping around); 1 KiB each.
CATCH_UP_MESSAGES = 50_000
# Messages per pull in the catch-up rows (the store config below lets a pull return this many).
PULL_MAX = 256
STORE_CONFIG = f"""
[broker]
max_pull_messages = {PULL_MAX}
max_json_body_bytes = 33554432
[store]
mapped_file_size_commit_log_bytes = 268435456
max_transfer_count_on_message_in_memory = {PULL_MAX}
max_transfer_bytes_on_message_in_memory = 1048576
"""
TARGETS = {
    "produce, single (JSON)": ("cpu", 2.0),  # server CPU per request, at most this many times the plain-ASGI no-op's
    "produce, 100-message batch (JSON)": ("messages", 100_000),
    "pull catch-up (batch format)": ("messages", 150_000),
}
NOOP_ROW = "plain-ASGI no-op GET (bench/noop_asgi.py)"


@dataclass
class Row:
    name: str
    requests_per_s: float
    messages_per_s: float
    ceiling: float
    errors: int
    cpu_us: float = float("nan")  # the server's CPU per request
    load: float = float("nan")  # 1-minute load average at the end of the run

    @property
    def ratio(self) -> float:
        return self.requests_per_s / self.ceiling if self.ceiling else 0.0

    @property
    def cpu_us_per_message(self) -> float:
        per_request = self.messages_per_s / self.requests_per_s if self.requests_per_s and self.messages_per_s else 1.0
        return self.cpu_us / per_request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Broker:
    def __init__(self, root: str, config_text: str = STORE_CONFIG) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.port = free_port()
        config = os.path.join(root, "bench.toml")
        with open(config, "w") as f:
            f.write(config_text)
        cmd = [sys.executable, "-m", "app", "serve", "--port", str(self.port), "--store", os.path.join(root, "store"), "--config", config]
        self.log = open(os.path.join(root, "broker.log"), "wb")
        self.proc = subprocess.Popen([*cmd, "--log-level", "warning"], cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if self.request("GET", "/readyz")[0] == 200:
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()  # not left running behind the error
        raise RuntimeError(f"broker did not become ready within {READY_TIMEOUT_S} s")

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json") -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers={"content-type": content_type} if body is not None else {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def ensure_wrk() -> str | None:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk not found: installing it with apt-get", flush=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], capture_output=True)
        return shutil.which("wrk")
    return None


def wrk(binary: str, url: str, script: str, seconds: int, connections: int, workdir: str) -> tuple[float, int]:
    """Requests per second and non-2xx count of one wrk run."""
    path = os.path.join(workdir, "script.lua")
    with open(path, "w") as f:
        f.write(script)
    # --timeout: a slow reply is counted in the rate, not as a socket error.
    cmd = [binary, "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", path, url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rate is None:
        raise RuntimeError(f"wrk gave no rate:\n{out}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = int(non_2xx.group(1)) if non_2xx else 0
    if socket_errors:
        errors += sum(int(x) for x in socket_errors.groups())
    return float(rate.group(1)), errors


def lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid Lua string literal for this ASCII text


def lua_bytes(data: bytes) -> str:
    """A Lua string literal holding `data` byte for byte (three-digit decimal escapes)."""
    return '"' + "".join(f"\\{b:03d}" for b in data) + '"'


def post_script(body: str | bytes, content_type: str, path: str) -> str:
    literal = lua_bytes(body) if isinstance(body, bytes) else lua_string(body)
    return f'wrk.method = "POST"\nwrk.path = {lua_string(path)}\nwrk.body = {literal}\nwrk.headers["Content-Type"] = "{content_type}"\n'


def binary_batch(body: bytes, count: int) -> bytes:
    """`count` messages of `body` in RocketMQ's batch encoding, each with a UNIQ_KEY (docs/http-api.md)."""
    from store.codec.message import new_uniq_key
    from store.native import pack_batch

    return pack_batch((body, f"UNIQ_KEY\x01{new_uniq_key()}\x02".encode(), 0) for _ in range(count))


def pull_script(queue: int, total: int, accept: str | None) -> str:
    header = f'wrk.headers["Accept"] = "{accept}"\n' if accept else ""
    return (
        header
        + "local n = 0\n"
        + "request = function()\n"
        + f"  local offset = (n * {PULL_MAX}) % {total - PULL_MAX}\n"
        + "  n = n + 1\n"
        + f'  return wrk.format("GET", "/v1/topics/{TOPIC}/queues/{queue}/messages?max={PULL_MAX}&offset=" .. offset)\n'
        + "end\n"
    )


def fill_queue(broker: Broker, queue: int, count: int) -> None:
    body = "x" * BODY_BYTES
    batch = json.dumps({"messages": [{"body": body, "queue_id": queue}] * 1000}).encode()
    for _ in range(count // 1000):
        status, reply = broker.request("POST", f"/v1/topics/{TOPIC}/messages", batch)
        assert status == 201, reply[:300]
    deadline = time.monotonic() + 60
    while json.loads(broker.request("GET", f"/v1/topics/{TOPIC}")[1])["queues"][queue]["max_offset"] < count:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.1)


def wrk_cpu(binary: str, url: str, script: str, seconds: int, connections: int, workdir: str, pid: int) -> tuple[float, int, float]:
    """(requests/s, errors, server CPU microseconds per request) of one wrk run."""
    before = cpu_seconds(pid)
    rate, errors = wrk(binary, url, script, seconds, connections, workdir)
    used = cpu_seconds(pid) - before
    return rate, errors, used / max(1.0, rate * seconds) * 1e6


def rates(broker: Broker, binary: str, seconds: int, connections: int, workdir: str) -> list[Row]:
    url = f"http://127.0.0.1:{broker.port}"
    body = "x" * BODY_BYTES
    pid = broker.proc.pid
    status, _ = broker.request("PUT", f"/v1/topics/{TOPIC}", json.dumps({"queues": 4}).encode())
    assert status in (200, 201)
    # Warm-up, not counted: the first commitlog file, the topic's queues, the server's code paths.
    single = post_script(json.dumps({"body": body, "queue_id": 1}), "application/json", f"/v1/topics/{TOPIC}/messages")
    wrk(binary, url, single, 2, connections, workdir)
    noop = NoopServer()
    try:
        rate, errors, cpu = wrk_cpu(binary, f"http://127.0.0.1:{noop.port}/", "", seconds, connections, workdir, noop.proc.pid)
    finally:
        noop.stop()
    rows = [Row(NOOP_ROW, rate, 0.0, rate, errors, cpu, os.getloadavg()[0])]
    # The broker's own no-op is measured before and after every scenario; a scenario's rate ratio uses the mean
    # of the two around it, so that load from elsewhere on a shared machine shifts both sides alike.
    ceilings = [wrk(binary, url + "/healthz", "", seconds, connections, workdir)[0]]

    def measure(name: str, script: str, per_request: int) -> None:
        rate, errors, cpu = wrk_cpu(binary, url, script, seconds, connections, workdir, pid)
        ceilings.append(wrk(binary, url + "/healthz", "", seconds, connections, workdir)[0])
        ceiling = (ceilings[-2] + ceilings[-1]) / 2
        rows.append(Row(name, rate, rate * per_request, ceiling, errors, cpu, os.getloadavg()[0]))
        print(f"  {name}: {rate:,.0f} req/s, {cpu:.1f} us server CPU/req, /healthz around it {ceiling:,.0f} req/s", flush=True)

    measure("GET /healthz (the broker's no-op)", 'wrk.path = "/healthz"\n', 1)
    path = f"/v1/topics/{TOPIC}/messages"
    measure("produce, single (JSON)", single, 1)
    batch = json.dumps({"messages": [{"body": body, "queue_id": 2}] * BATCH})
    measure(f"produce, {BATCH}-message batch (JSON)", post_script(batch, "application/json", path), BATCH)
    encoded = binary_batch(body.encode(), BATCH)
    measure(f"produce, {BATCH}-message batch (binary)", post_script(encoded, "application/x-tidemq-batch", path + "?queue_id=2"), BATCH)
    measure("produce, raw body", post_script(body, "application/octet-stream", path + "?queue_id=3"), 1)
    fill_queue(broker, 0, CATCH_UP_MESSAGES)
    measure("pull catch-up (JSON)", pull_script(0, CATCH_UP_MESSAGES, None), PULL_MAX)
    measure("pull catch-up (batch format)", pull_script(0, CATCH_UP_MESSAGES, "application/x-tidemq-batch"), PULL_MAX)
    return rows


def store_baselines(root: str) -> tuple[float, float, float, float]:
    """Messages/s and CPU µs per message (this process, every thread) of the store itself: 100-message build +
    put_messages, 256-message get_message."""
    from store import DefaultMessageStore, GetMessageStatus, MessageStoreConfig, PutBatch, build_message

    config = MessageStoreConfig(
        store_path_root_dir=os.path.join(root, "baseline"),
        mapped_file_size_commit_log_bytes=1 << 28,
        max_transfer_count_on_message_in_memory=PULL_MAX,
        max_transfer_bytes_on_message_in_memory=1 << 20,
    )
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    try:
        body = b"x" * BODY_BYTES
        rounds = 200
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(rounds):  # build_message is timed too: every front end pays it
            assert store.put(PutBatch.of([build_message(TOPIC, body, 0) for _ in range(BATCH)])).result().ok
        put_rate = rounds * BATCH / (time.perf_counter() - started)
        put_cpu = (time.process_time() - cpu) / (rounds * BATCH) * 1e6
        total = rounds * BATCH
        deadline = time.monotonic() + 60
        while store.get_max_offset_in_queue(TOPIC, 0) < total:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        read = 0
        started, cpu = time.perf_counter(), time.process_time()
        for offset in range(0, total - PULL_MAX, PULL_MAX):
            result = store.get_message("", TOPIC, 0, offset, PULL_MAX, None)
            try:
                assert result.status is GetMessageStatus.FOUND
                read += result.message_count
                result.to_bytes()
            finally:
                result.release()
        get_rate = read / (time.perf_counter() - started)
        get_cpu = (time.process_time() - cpu) / max(1, read) * 1e6
    finally:
        store.shutdown()
    return put_rate, put_cpu, get_rate, get_cpu


def consume_latencies(port: int, topic: str, offset: int, stop_at_count: int, deadline_s: float, out: Any) -> None:
    """Consumer process: long-poll the queue and report, per message, now minus the send time it carries."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies: list[float] = []
    end = time.monotonic() + deadline_s
    while len(latencies) < stop_at_count and time.monotonic() < end:
        conn.request("GET", f"/v1/topics/{topic}/queues/0/messages?offset={offset}&max=32&wait_ms=1000")
        reply = json.loads(conn.getresponse().read())
        now = time.monotonic_ns()
        latencies.extend((now - int(m["body"][:STAMP_DIGITS])) / 1e6 for m in reply["messages"])
        offset = reply["next_offset"]
    conn.close()
    out.put(latencies)


def delivery_latency(broker: Broker, rate_per_s: int, seconds: float) -> tuple[float, float, int]:
    """p50 and p99 (ms) from the start of a produce request to the held pull's reply carrying it.

    The consumer is another process (no GIL shared with the producer); each body is 1 KiB whose
    first STAMP_DIGITS bytes are the CLOCK_MONOTONIC time its send started, which both processes read alike.
    """
    topic = "latency"
    broker.request("PUT", f"/v1/topics/{topic}", json.dumps({"queues": 1}).encode())
    start = json.loads(broker.request("GET", f"/v1/topics/{topic}")[1])["queues"][0]["max_offset"]
    count = int(rate_per_s * seconds)
    results: multiprocessing.Queue[list[float]] = multiprocessing.Queue()
    consumer = multiprocessing.Process(target=consume_latencies, args=(broker.port, topic, start, count, seconds + 30, results))
    consumer.start()
    time.sleep(0.5)  # the consumer's first pull is held before the first send
    conn = http.client.HTTPConnection("127.0.0.1", broker.port, timeout=30)
    interval = 1.0 / rate_per_s
    next_send = time.monotonic()
    for _ in range(count):
        while time.monotonic() < next_send:
            time.sleep(max(0.0, next_send - time.monotonic() - 0.0005))
        body = json.dumps({"body": f"{time.monotonic_ns():0{STAMP_DIGITS}d}".ljust(BODY_BYTES, "x"), "queue_id": 0})
        conn.request("POST", f"/v1/topics/{topic}/messages", body=body, headers={"content-type": "application/json"})
        conn.getresponse().read()
        next_send += interval
    conn.close()
    latencies = sorted(results.get(timeout=seconds + 60))
    consumer.join(10)
    if not latencies:
        return float("nan"), float("nan"), 0
    return latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], len(latencies)


def render(rows: list[Row], latency: tuple[float, float, int], rate_per_s: int, baselines: tuple[float, float, float, float]) -> str:
    noop = next((row for row in rows if row.name == NOOP_ROW), None)
    lines = [
        f"tidemq HTTP benchmark ({platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}); "
        f"bodies of {BODY_BYTES} B; wrk for every row; server CPU from its process CPU clock around each run; load average "
        f"{os.getloadavg()[0]:.2f} at the end",
        "",
        "| Scenario | Requests/s | Messages/s | server CPU µs/req | µs/msg | CPU/req ratio to the no-op | rate ratio to /healthz around it "
        "| Errors | load | Target |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        cpu_ratio = row.cpu_us / noop.cpu_us if noop is not None and noop.cpu_us else float("nan")
        target = ""
        if row.name in TARGETS:
            kind, value = TARGETS[row.name]
            if kind == "cpu":
                met = cpu_ratio <= value
                target = f"<= {value:g}x the no-op's CPU/req: {'met' if met else 'NOT met'}"
            else:
                met = row.messages_per_s >= value
                target = f">= {value:,} msg/s: {'met' if met else 'NOT met'}"
        messages = f"{row.messages_per_s:,.0f}" if row.messages_per_s else "-"
        lines.append(
            f"| {row.name} | {row.requests_per_s:,.0f} | {messages} | {row.cpu_us:.1f} | {row.cpu_us_per_message:.2f} | {cpu_ratio:.2f} "
            f"| {row.ratio:.2f} | {row.errors} | {row.load:.2f} | {target} |"
        )
    put_rate, put_cpu, get_rate, get_cpu = baselines
    by_name = {row.name: row for row in rows}
    lines += [
        "",
        f"Store alone, in-process, same run: build_message + put_messages of {BATCH} x {BODY_BYTES} B {put_rate:,.0f} msg/s, "
        f"{put_cpu:.2f} µs CPU/msg; get_message of {PULL_MAX} + to_bytes {get_rate:,.0f} msg/s, {get_cpu:.2f} µs CPU/msg.",
    ]
    batch_row = by_name.get(f"produce, {BATCH}-message batch (JSON)")
    binary_row = by_name.get(f"produce, {BATCH}-message batch (binary)")
    pull_row = by_name.get("pull catch-up (batch format)")
    if batch_row and binary_row:
        lines.append(f"Binary batch produce / JSON batch produce (messages/s): {binary_row.messages_per_s / batch_row.messages_per_s:.2f}.")
    if batch_row and pull_row:
        lines.append(
            f"HTTP / store: batch produce {batch_row.messages_per_s / put_rate:.2f} of the rate at {batch_row.cpu_us_per_message / put_cpu:.2f}x "
            f"the CPU per message, batch-format pull {pull_row.messages_per_s / get_rate:.2f} of the rate at "
            f"{pull_row.cpu_us_per_message / get_cpu:.2f}x the CPU per message."
        )
    p50, p99, samples = latency
    verdict = "met" if p99 <= 5.0 else "NOT met"
    lines += [
        "",
        f"Produce -> long-poll delivery at {rate_per_s} msg/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms over {samples} messages "
        f"(target p99 <= 5 ms: {verdict})",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (2 s per scenario)")
    parser.add_argument("--seconds", type=int, default=5, help="seconds per wrk scenario")
    parser.add_argument("--connections", type=int, default=32, help="wrk connections")
    parser.add_argument("--latency-rate", type=int, default=200, help="messages per second of the latency run")
    args = parser.parse_args()
    seconds = 2 if args.quick else args.seconds
    with tempfile.TemporaryDirectory(prefix="tidemq-http-bench-") as root:
        broker = Broker(root)
        try:
            binary = ensure_wrk()
            rows: list[Row] = []
            if binary is None:
                print("wrk is not installed and cannot be installed here (apt-get install -y wrk): skipping the request-rate rows")
            else:
                print(f"wrk: {binary}, {args.connections} connections, {seconds} s per scenario", flush=True)
                rows = rates(broker, binary, seconds, args.connections, root)
            latency = delivery_latency(broker, args.latency_rate, 2.0 if args.quick else 5.0)
        finally:
            broker.stop()
        baselines = store_baselines(root)
    print()
    print(render(rows, latency, args.latency_rate, baselines))


if __name__ == "__main__":
    main()
