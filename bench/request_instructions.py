"""Instructions per HTTP request, counted by callgrind: one source tree against another, without noise.

CPU time per request moves with everything else a shared machine runs (the same code measured 120
to 210 µs per produce within one hour here); the instructions a request executes do not. Each tree
(a checkout of tidemq: the baseline first, then this one) serves a broker process (`python -m app
serve` run from that tree, under valgrind's callgrind with collection off) over a temporary store.
Per scenario, requests are first sent uncounted (warm-up: imports, caches, the first files), then
`--requests` more are sent with collection on, over `--connections` keep-alive connections each
with one request in flight, and the counts are dumped per thread. Reported: user-space instructions
per request on the event loop's thread (where a request is served) and on all threads (dispatch,
flush, allocation). Kernel work (system calls, page faults) is not counted: the CPU-time benches
(bench/versus_redis.py, bench/produce_cpu_bench.py) carry it. Scenarios (1 KiB bodies): single JSON
produce, raw produce, JSON batch of 100, binary batch of 100, a pull of one message, GET /healthz, and
a group's receive of one message followed by the ack of its handle (one connection; counted per pair), a pull
held at a queue's end answered by a JSON produce on another connection (counted per pair), and the raw produce on a
broker of its own with SYNC_FLUSH (each reply held until its loop turn's group commit: the held reply, the group's
wait and the flush thread's work per message).

Usage: python bench/request_instructions.py --before TREE [--after TREE] [--requests N] [--only a,b]
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.http_bench import STORE_CONFIG, binary_batch, free_port
from bench.load_generator import http_request

BODY = "x" * 1024
TOPIC = "bench"
SCENARIOS = {
    "single JSON produce": http_request(
        "POST", f"/v1/topics/{TOPIC}/messages", json.dumps({"body": BODY, "queue_id": 1}).encode(), "application/json"
    ),
    "raw produce": http_request("POST", f"/v1/topics/{TOPIC}/messages?queue_id=1", BODY.encode(), "application/octet-stream"),
    "JSON batch 100": http_request(
        "POST", f"/v1/topics/{TOPIC}/messages", json.dumps({"messages": [{"body": BODY, "queue_id": 2}] * 100}).encode(), "application/json"
    ),
    "binary batch 100": http_request(
        "POST", f"/v1/topics/{TOPIC}/messages?queue_id=3", binary_batch(BODY.encode(), 100), "application/x-tidemq-batch"
    ),
    "pull of one message": http_request("GET", f"/v1/topics/{TOPIC}/queues/1/messages?offset=0&max=1"),
    "GET /healthz": http_request("GET", "/healthz"),
}
# Scenarios whose requests depend on earlier replies, counted per exchange (two requests): a receive of one message
# and the ack of its receipt handle, on one connection; a pull held at a queue's end on one connection and the JSON
# produce that answers it on another (what a delivery costs: the held pull's request, the produce, its dispatch, the
# pull woken, its read and both replies).
POP_TOPIC = "popbench"
DELIVERY_TOPIC = "deliverybench"
RECEIVE_ACK = "receive + ack of one message"
DELIVERY = "produce to a held pull"
EXCHANGES = {RECEIVE_ACK, DELIVERY}
# Scenarios served by a broker with SYNC_FLUSH (one started for them, after the ASYNC_FLUSH one).
DURABLE = {"durable raw produce (SYNC_FLUSH)": SCENARIOS["raw produce"]}
HOLD_SETTLE_S = 0.03  # given to a held pull to be parked before its produce is sent (a broker under callgrind is slow)
WARMUP_REQUESTS = 200
READY_TIMEOUT_S = 600.0  # a broker under callgrind starts tens of times slower
REPLY_TIMEOUT_S = 120.0


class CountedBroker:
    """A broker process of `tree` under callgrind, collection off until `count` turns it on."""

    def __init__(self, tree: str, root: str, flush_disk_type: str = "ASYNC_FLUSH") -> None:
        self.port = free_port()
        config = os.path.join(root, "broker.toml")
        with open(config, "w") as f:
            f.write(STORE_CONFIG.replace("268435456", "67108864") + f'flush_disk_type = "{flush_disk_type}"\n')
        self.out = os.path.join(root, "callgrind.out")
        cmd = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes", f"--callgrind-out-file={self.out}",
            sys.executable, "-m", "app", "serve", "--port", str(self.port), "--store", os.path.join(root, "store"),
            "--config", config, "--log-level", "warning",
        ]  # fmt: skip
        self.log = open(os.path.join(root, "valgrind.log"), "wb")
        self.proc = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._ready():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"the broker of {tree} did not start under callgrind (see {self.log.name})")
            time.sleep(0.5)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REPLY_TIMEOUT_S)
        conn.request("PUT", f"/v1/topics/{TOPIC}", body=b'{"queues": 4}', headers={"content-type": "application/json"})
        assert conn.getresponse().read() is not None
        conn.request(
            "POST", f"/v1/topics/{TOPIC}/messages?queue_id=1", body=BODY.encode(), headers={"content-type": "application/octet-stream"}
        )
        reply = conn.getresponse()
        reply.read()
        conn.close()
        if reply.status != 201:  # the pull scenario reads this message
            raise RuntimeError(f"the seed message was refused: {reply.status}")

    def _ready(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        except OSError:
            return False

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True, capture_output=True)

    def count(self, request: bytes, requests: int, connections: int) -> tuple[float, float]:
        """(instructions per request on the loop thread, on all threads) of `requests` more of `request`."""
        send_all(self.port, request, WARMUP_REQUESTS, connections)
        self._control("--zero")
        self._control("--instr=on")
        send_all(self.port, request, requests, connections)
        self._control("--instr=off")
        return self._dumped(requests)

    def _dumped(self, requests: int) -> tuple[float, float]:
        """Dump the counts collected and divide them by `requests`: (loop thread, all threads)."""
        for stale in glob.glob(self.out + "*"):
            os.unlink(stale)
        self._control("--dump")
        per_thread = {}
        for path in glob.glob(self.out + "*"):
            thread = path.rsplit("-", 1)[-1]
            with open(path) as f:  # the last "totals:" (or "summary:") line holds the file's count
                counts = [int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:"))]
            per_thread[thread] = counts[-1] if counts else 0
        loop = per_thread.get("01", 0)  # the first thread: the event loop's (app.server runs uvicorn on it)
        return loop / requests, sum(per_thread.values()) / requests

    def count_exchanges(self, exchanges: int) -> tuple[float, float]:
        """(instructions per exchange on the loop thread, on all threads) of `exchanges` receive + ack exchanges,
        after WARMUP_REQUESTS uncounted; the messages are produced first, uncounted."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REPLY_TIMEOUT_S)
        try:
            call(conn, "PUT", f"/v1/topics/{POP_TOPIC}", b'{"queues": 1}')
            body = json.dumps({"body": BODY, "queue_id": 0}).encode()
            for _ in range(WARMUP_REQUESTS + exchanges):
                call(conn, "POST", f"/v1/topics/{POP_TOPIC}/messages", body)
            for _ in range(WARMUP_REQUESTS):
                receive_and_ack(conn)
            self._control("--zero")
            self._control("--instr=on")
            for _ in range(exchanges):
                receive_and_ack(conn)
            self._control("--instr=off")
        finally:
            conn.close()
        return self._dumped(exchanges)

    def count_deliveries(self, exchanges: int) -> tuple[float, float]:
        """(instructions per exchange on the loop thread, on all threads) of `exchanges` held pulls each answered by a
        produce, after WARMUP_REQUESTS uncounted. A pull is sent, given HOLD_SETTLE_S to be held, then answered."""
        puller = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REPLY_TIMEOUT_S)
        producer = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REPLY_TIMEOUT_S)
        body = json.dumps({"body": BODY, "queue_id": 0}).encode()
        try:
            call(producer, "PUT", f"/v1/topics/{DELIVERY_TOPIC}", b'{"queues": 1}')
            offset = 0

            def deliver() -> None:
                nonlocal offset
                puller.request("GET", f"/v1/topics/{DELIVERY_TOPIC}/queues/0/messages?offset={offset}&max=1&wait_ms=30000")
                time.sleep(HOLD_SETTLE_S)
                call(producer, "POST", f"/v1/topics/{DELIVERY_TOPIC}/messages", body)
                reply = puller.getresponse()
                got = json.loads(reply.read())
                if reply.status != 200 or len(got["messages"]) != 1:
                    raise RuntimeError(f"a held pull was answered {reply.status} {str(got)[:200]}")
                offset = got["next_offset"]

            for _ in range(WARMUP_REQUESTS // 2):
                deliver()
            self._control("--zero")
            self._control("--instr=on")
            for _ in range(exchanges):
                deliver()
            self._control("--instr=off")
        finally:
            puller.close()
            producer.close()
        return self._dumped(exchanges)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def send_all(port: int, request: bytes, total: int, connections: int) -> None:
    """`total` requests over `connections` keep-alive connections, one in flight on each; every reply must be a 2xx."""
    selector = selectors.DefaultSelector()
    left = total
    answered = 0
    socks = []
    try:
        for _ in range(min(connections, total)):
            sock = socket.create_connection(("127.0.0.1", port), timeout=REPLY_TIMEOUT_S)
            sock.setblocking(False)
            socks.append(sock)
            selector.register(sock, selectors.EVENT_READ, bytearray())
            sock.sendall(request)
            left -= 1
        while answered < total:
            events = selector.select(REPLY_TIMEOUT_S)
            if not events:
                raise TimeoutError(f"no reply within {REPLY_TIMEOUT_S} s")
            for key, _ in events:
                assert isinstance(key.fileobj, socket.socket)
                sock, buffer = key.fileobj, key.data
                data = sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("the broker closed a connection")
                buffer += data
                while take_reply(buffer) is not None:
                    answered += 1
                    if left > 0:
                        sock.setblocking(True)
                        sock.sendall(request)
                        sock.setblocking(False)
                        left -= 1
    finally:
        selector.close()
        for sock in socks:
            sock.close()


def call(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None) -> bytes:
    """One request on `conn`; its reply's body (a reply that is not a 2xx raises)."""
    conn.request(method, path, body=body, headers={"content-type": "application/json"} if body is not None else {})
    reply = conn.getresponse()
    data = reply.read()
    if not 200 <= reply.status < 300:
        raise RuntimeError(f"{method} {path} was refused: {reply.status} {data[:200]!r}")
    return data


def receive_and_ack(conn: http.client.HTTPConnection) -> None:
    """Receive one message of POP_TOPIC and ack it."""
    got = json.loads(call(conn, "POST", f"/v1/groups/bench/topics/{POP_TOPIC}/receive?max=1&invisible_ms=60000"))
    (message,) = got["messages"]
    acked = json.loads(
        call(
            conn, "POST", f"/v1/groups/bench/topics/{POP_TOPIC}/ack", json.dumps({"receipt_handles": [message["receipt_handle"]]}).encode()
        )
    )
    assert acked["results"][0]["status"] == "OK", acked


def take_reply(buffer: bytearray) -> bytes | None:
    """The first whole reply in `buffer` (removed from it), or None; a reply that is not a 2xx raises."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buffer[:end]).lower()
    length = int(head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
    if len(buffer) < end + 4 + length:
        return None
    if not head.startswith((b"http/1.1 200", b"http/1.1 201")):
        raise RuntimeError(f"a request was refused: {head[:200]!r}")
    reply = bytes(buffer[: end + 4 + length])
    del buffer[: end + 4 + length]
    return reply


def measure(tree: str, scenarios: list[str], requests: int, connections: int) -> dict[str, tuple[float, float]]:
    counted: dict[str, tuple[float, float]] = {}
    for flush_disk_type in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        served = [name for name in scenarios if (name in DURABLE) == (flush_disk_type == "SYNC_FLUSH")]
        if not served:
            continue
        root = tempfile.mkdtemp(prefix="tidemq-instructions-")
        try:
            broker = CountedBroker(tree, root, flush_disk_type)
            try:
                for name in served:
                    if name == RECEIVE_ACK:
                        counted[name] = broker.count_exchanges(requests)
                    elif name == DELIVERY:
                        counted[name] = broker.count_deliveries(requests)
                    else:
                        counted[name] = broker.count({**SCENARIOS, **DURABLE}[name], requests, connections)
            finally:
                broker.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the baseline tree (a checkout with its C extension built)")
    parser.add_argument("--after", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), help="the tree measured against it")
    parser.add_argument("--requests", type=int, default=400, help="requests counted per scenario")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections, one request in flight on each")
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind (with callgrind_control) is needed: apt-get install valgrind")
    scenarios = [s for s in [*SCENARIOS, *sorted(EXCHANGES), *DURABLE] if not args.only or s in args.only.split(",")]
    before = measure(os.path.abspath(args.before), scenarios, args.requests, args.connections)
    after = measure(os.path.abspath(args.after), scenarios, args.requests, args.connections)
    print(f"User-space instructions per request (callgrind; {args.requests} requests per scenario, {args.connections} connections)")
    print("| scenario | loop thread before | after | after/before | all threads before | after | after/before |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in scenarios:
        (lb, ab), (la, aa) = before[name], after[name]
        print(f"| {name} | {lb / 1e3:,.0f}k | {la / 1e3:,.0f}k | {la / lb:.2f} | {ab / 1e3:,.0f}k | {aa / 1e3:,.0f}k | {aa / ab:.2f} |")


if __name__ == "__main__":
    main()
