"""Group (POP) consumption throughput: receive + ack against the offset pull, and against Redis Streams.

One broker process (`python -m app serve`, ASYNC_FLUSH, a temporary store) holds a topic of
`--queues` queues pre-filled with `--messages` messages of 1 KiB, each with a known UNIQ_KEY.
`--consumers` consumer threads (http.client, one keep-alive connection each; measured cheaper
in client CPU than asyncio + httpx on this machine) then read it three ways:

1. offset pull (baseline): consumer i owns queue i % queues (with 8 consumers over 8 queues: no
   queue is read twice) and loops `GET .../queues/{q}/messages?offset=N&max=32` (JSON, the format
   receive answers in) -> `PUT /v1/groups/{g}/offsets`, wrapping to offset 0 at the end of its
   queue, for `--seconds`; measured before and after the receive phase, the baseline is their mean;
2. receive + ack: every consumer loops `POST .../receive?max=32` -> `POST .../ack` with all the
   handles until the whole topic was acked once. Checked: every pre-filled msg_id acked exactly
   once, every ack OK, no message delivered twice, no HTTP error;
3. the peer, Redis Streams consumer groups (Debian's redis-server, AOF with appendfsync everysec
   like tidemq's ASYNC_FLUSH): the same messages in one stream, the same number of consumer
   threads with redis-py looping `XREADGROUP COUNT 32` -> `XACK`, and `XAUTOCLAIM` (pending entries
   idle past the same invisible time) when nothing new is there. It is the closest SQS-style
   semantics installable here: SQS itself and ElasticMQ are not Debian packages. Checked the same way.

Every rate is given with the server's CPU per message (/proc/PID/stat utime + stime around the
measurement) and as a ratio to the offset pull of the same run, because the machine is shared.

With `--profile FILE`, py-spy (when installed) samples the broker's thread holding the GIL during
receive + ack (the broker is one process, bound by the GIL) and the top self and inclusive costs are
printed; the samples include time a GIL holder spent descheduled on a loaded machine.

Usage: python bench/pop_bench.py [--quick] [--seconds S] [--messages N] [--consumers C] [--queues Q] [--profile FILE]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.compare_peers import RedisPeer
from bench.http_bench import ROOT, STORE_CONFIG, Broker
from bench.load_generator import cpu_seconds

BODY_BYTES = 1024
RECEIVE_MAX = 32  # messages per receive, per pull and per XREADGROUP
INVISIBLE_MS = 60_000  # receive's invisible time and XAUTOCLAIM's min idle time: far past any run
EMPTY_WAIT_MS = 200  # how long a receive / XREADGROUP is held after an empty answer
FILL_BATCH = 1_000  # messages per pre-fill request (max_batch_messages) or Redis pipeline
TOPIC = "pop"
POP_GROUP = "pop-bench"
PULL_GROUP = "pull-bench"
STREAM = "pop"
MAX_ERRORS = 20  # errors kept for the report; a phase stops early past it
GOAL = 0.5  # receive + ack / offset pull
# Frames every request passes through, left out of the profile's inclusive table (they hold everything).
WRAPPERS = frozenset(
    {
        "<module> (app/__main__.py)",
        "main (app/cli.py)",
        "run (app/server.py)",
        "HotRoutes.__call__ (app/hot_routes.py)",
        "BodyLimit.__call__ (app/body_limit.py)",
        "StartupGate.__call__ (app/startup.py)",
        "StrictJsonRoute.get_route_handler.<locals>.strict_handler (app/strict_json.py)",
    }
)


@dataclass
class Phase:
    """One measured phase: messages consumed, wall time, the server's CPU, and what went wrong."""

    name: str
    messages: int = 0
    seconds: float = float("nan")
    server_cpu_s: float = float("nan")
    errors: list[str] = field(default_factory=list)
    distinct: int = 0  # distinct msg_ids consumed (drain phases)
    client_cpu_s: float = float("nan")  # CPU of this process (the consumer threads) meanwhile

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds and self.seconds == self.seconds else float("nan")

    @property
    def cpu_us_per_message(self) -> float:
        return self.server_cpu_s / self.messages * 1e6 if self.messages else float("nan")

    @property
    def server_cores(self) -> float:
        return self.server_cpu_s / self.seconds if self.seconds else float("nan")

    @property
    def client_cores(self) -> float:
        return self.client_cpu_s / self.seconds if self.seconds else float("nan")


class Shared:
    """State the consumer threads of one phase share: counts, msg_ids seen, errors, the stop signal."""

    def __init__(self, target: int, seconds: float | None = None) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.target = target  # stop once this many messages were consumed (drain phases)
        self.seconds = seconds  # or after this long (timed phases), counting what was answered before then
        self.stop_at = float("inf")  # perf_counter time the timed phase ends, set as it starts
        self.count = 0
        self.seen: Counter[str] = Counter()
        self.errors: list[str] = []
        self.finished_at = float("nan")

    def add(self, n: int, ids: Sequence[str] = ()) -> None:
        with self.lock:
            self.count += n
            self.seen.update(ids)
            if self.count >= self.target and not self.done.is_set():
                self.finished_at = time.perf_counter()
                self.done.set()

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text[:300])
            if len(self.errors) >= MAX_ERRORS:
                self.done.set()

    def running(self) -> bool:
        return not self.done.is_set() and time.perf_counter() < self.stop_at


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def ratio(a: float, b: float) -> float:
    return a / b if b and b == b and a == a else float("nan")


# tidemq -----------------------------------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection to the broker (http.client)."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = {"content-type": "application/json"} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        self.conn.close()


def prefill(broker: Broker, queues: int, count: int) -> list[str]:
    """`count` messages of BODY_BYTES spread evenly over the queues as binary batches; their UNIQ_KEYs (msg_ids)."""
    from store.codec.message import new_uniq_keys
    from store.native import pack_batch

    status, reply = broker.request("PUT", f"/v1/topics/{TOPIC}", orjson.dumps({"queues": queues}))
    assert status in (200, 201), reply[:300]
    body, ids = b"x" * BODY_BYTES, []
    conn = Connection(broker.port)
    try:
        for start in range(0, count, FILL_BATCH):
            # Keys per batch: one new_uniq_keys call reads the clock once and its 16-bit counter wraps after 65,536 keys.
            chunk = new_uniq_keys(min(FILL_BATCH, count - start))
            ids += chunk
            batch = pack_batch((body, f"UNIQ_KEY\x01{key}\x02".encode(), 0) for key in chunk)
            queue = (start // FILL_BATCH) % queues
            conn.conn.request("POST", f"/v1/topics/{TOPIC}/messages?queue_id={queue}", body=batch,
                              headers={"content-type": "application/x-tidemq-batch"})  # fmt: skip
            response = conn.conn.getresponse()
            reply = response.read()
            assert response.status == 201, reply[:300]
    finally:
        conn.close()
    assert len(set(ids)) == count, f"{count - len(set(ids))} duplicate UNIQ_KEYs generated"
    deadline = time.monotonic() + 120
    while sum(q["max_offset"] for q in orjson.loads(broker.request("GET", f"/v1/topics/{TOPIC}")[1])["queues"]) < count:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.1)
    return ids


def queue_ends(broker: Broker) -> list[int]:
    return [q["max_offset"] for q in orjson.loads(broker.request("GET", f"/v1/topics/{TOPIC}")[1])["queues"]]


def pull_consumer(port: int, queue: int, end: int, shared: Shared) -> None:
    """Pull its queue from offset 0 in steps of RECEIVE_MAX, committing each step; wrap to 0 at `end`."""
    conn, offset = Connection(port), 0
    try:
        while shared.running():
            status, body = conn.call("GET", f"/v1/topics/{TOPIC}/queues/{queue}/messages?offset={offset}&max={RECEIVE_MAX}")
            reply = orjson.loads(body)
            if status != 200 or reply["status"] != "FOUND":
                shared.error(f"pull queue {queue} offset {offset}: {status} {body[:200]!r}")
                offset = 0
                continue
            offset = reply["next_offset"] if reply["next_offset"] < end else 0
            commit = orjson.dumps({"topic": TOPIC, "queue_id": queue, "offset": reply["next_offset"]})
            status, body = conn.call("PUT", f"/v1/groups/{PULL_GROUP}/offsets", commit)
            if status != 200:
                shared.error(f"commit queue {queue}: {status} {body[:200]!r}")
                continue
            if time.perf_counter() < shared.stop_at:
                shared.add(len(reply["messages"]))
    finally:
        conn.close()


def pop_consumer(port: int, shared: Shared) -> None:
    """receive(max=RECEIVE_MAX) -> ack(every handle), until the whole topic was acked; held receives when empty."""
    conn, wait_ms = Connection(port), 0
    receive = f"/v1/groups/{POP_GROUP}/topics/{TOPIC}/receive?max={RECEIVE_MAX}&invisible_ms={INVISIBLE_MS}&wait_ms="
    try:
        while shared.running():
            status, body = conn.call("POST", f"{receive}{wait_ms}")
            if status != 200:
                shared.error(f"receive: {status} {body[:200]!r}")
                continue
            messages = orjson.loads(body)["messages"]
            wait_ms = 0 if messages else EMPTY_WAIT_MS
            if not messages:
                continue
            for m in messages:
                if m["reconsume_times"] != 0:
                    shared.error(f"{m['msg_id']} delivered again (reconsume_times {m['reconsume_times']})")
            ack = orjson.dumps({"receipt_handles": [m["receipt_handle"] for m in messages]})
            status, body = conn.call("POST", f"/v1/groups/{POP_GROUP}/topics/{TOPIC}/ack", ack)
            if status != 200:
                shared.error(f"ack: {status} {body[:200]!r}")
                continue
            results = orjson.loads(body)["results"]
            not_ok = [r["status"] for r in results if r["status"] != "OK"]
            if not_ok:
                shared.error(f"ack statuses {Counter(not_ok)}")
            ok = [m["msg_id"] for m, r in zip(messages, results, strict=True) if r["status"] == "OK"]
            shared.add(len(ok), ok)
    finally:
        conn.close()


def run_consumers(name: str, workers: Sequence[Callable[[], None]], shared: Shared, pid: int, limit_s: float) -> Phase:
    """Start the consumer threads together; wall time and the server's CPU until the phase is done: drained
    (shared.target reached), `limit_s` passed, or, for a timed phase (shared.seconds), its time is up."""
    threads = [threading.Thread(target=worker, daemon=True) for worker in workers]
    cpu, client, started = cpu_seconds(pid), time.process_time(), time.perf_counter()
    timed = shared.seconds is not None
    if shared.seconds is not None:
        shared.stop_at = started + shared.seconds
    for thread in threads:
        thread.start()
    finished = shared.done.wait(timeout=shared.seconds if shared.seconds is not None else limit_s)
    ended = shared.finished_at if finished and not timed else time.perf_counter()
    phase = Phase(
        name, shared.count, ended - started, cpu_seconds(pid) - cpu, shared.errors, len(shared.seen), time.process_time() - client
    )
    shared.done.set()
    for thread in threads:
        thread.join(30)
    if not timed and not finished:
        phase.errors.append(f"drained {shared.count:,} of {shared.target:,} messages in {limit_s:.0f} s")
    return phase


def pull_phase(broker: Broker, consumers: int, seconds: float) -> Phase:
    ends = queue_ends(broker)
    shared = Shared(target=1 << 62, seconds=seconds)
    workers = [partial(pull_consumer, broker.port, i % len(ends), ends[i % len(ends)], shared) for i in range(consumers)]
    return run_consumers("offset pull (JSON) + commit", workers, shared, broker.proc.pid, seconds)


def pop_phase(broker: Broker, consumers: int, ids: list[str], limit_s: float) -> Phase:
    shared = Shared(target=len(ids))
    workers = [partial(pop_consumer, broker.port, shared) for _ in range(consumers)]
    phase = run_consumers("receive + ack", workers, shared, broker.proc.pid, limit_s)
    phase.errors += exactly_once(ids, shared.seen)
    return phase


def exactly_once(ids: list[str], seen: Counter[str]) -> list[str]:
    """What breaks 'every pre-filled message acked exactly once'."""
    problems = []
    missing = [i for i in ids if i not in seen]
    twice = [i for i, n in seen.items() if n > 1]
    unknown = set(seen) - set(ids)
    if missing:
        problems.append(f"{len(missing):,} pre-filled messages never acked, e.g. {missing[:3]}")
    if twice:
        problems.append(f"{len(twice):,} messages acked more than once, e.g. {twice[:3]}")
    if unknown:
        problems.append(f"{len(unknown):,} acked msg_ids were never pre-filled, e.g. {sorted(unknown)[:3]}")
    return problems


def tidemq_phases(root: str, args: argparse.Namespace) -> tuple[list[Phase], list[str]]:
    """Pull, receive + ack, pull again, on one broker; the pre-filled msg_ids for the peer."""
    broker = Broker(root, STORE_CONFIG + 'flush_disk_type = "ASYNC_FLUSH"\n')
    try:
        started = time.perf_counter()
        ids = prefill(broker, args.queues, args.messages)
        print(f"pre-filled {len(ids):,} x {BODY_BYTES} B over {args.queues} queues in {time.perf_counter() - started:.1f} s", flush=True)
        before = pull_phase(broker, args.consumers, args.seconds)
        print(f"  {before.name}: {before.rate:,.0f} msg/s", flush=True)
        spy = start_profile(args.profile, broker.proc.pid) if args.profile else None
        pop = pop_phase(broker, args.consumers, ids, args.limit)
        if spy is not None:
            stop_profile(spy)
        print(f"  {pop.name}: {pop.rate:,.0f} msg/s ({pop.messages:,} in {pop.seconds:.1f} s)", flush=True)
        time.sleep(1.0)  # the revive service's pass over the acks of the last receives, outside the next measurement
        after = pull_phase(broker, args.consumers, args.seconds)
        print(f"  {after.name}: {after.rate:,.0f} msg/s", flush=True)
    finally:
        broker.stop()
    return [before, pop, after], ids


# Redis Streams ----------------------------------------------------------------------------


class RedisStreamsPeer(RedisPeer):
    """Redis with AOF (appendfsync everysec) and no background AOF rewrite (it would fork mid-run)."""

    def __init__(self) -> None:
        super().__init__("everysec")
        self.label = "redis (appendonly yes, appendfsync everysec)"

    def argv(self, data_dir: Path) -> list[str]:
        return [*super().argv(data_dir), "--auto-aof-rewrite-percentage", "0"]


def redis_prefill(port: int, ids: list[str]) -> None:
    import redis

    client = redis.Redis(port=port)
    body = b"x" * BODY_BYTES
    for start in range(0, len(ids), FILL_BATCH):
        pipe = client.pipeline(transaction=False)
        for key in ids[start : start + FILL_BATCH]:
            pipe.xadd(STREAM, {"id": key, "body": body})
        pipe.execute()
    client.xgroup_create(STREAM, POP_GROUP, id="0")
    client.close()


def redis_consumer(port: int, name: str, shared: Shared) -> None:
    """XREADGROUP COUNT RECEIVE_MAX -> XACK, until the stream was acked; XAUTOCLAIM of idle pending entries when nothing is new."""
    import redis

    client = redis.Redis(port=port)
    block: int | None = None  # no BLOCK, except after an empty turn
    try:
        while shared.running():
            reply: Any = client.xreadgroup(POP_GROUP, name, {STREAM: ">"}, count=RECEIVE_MAX, block=block)
            entries: list[tuple[bytes, dict[bytes, bytes]]] = reply[0][1] if reply else []
            if not entries:
                claimed: Any = client.xautoclaim(STREAM, POP_GROUP, name, min_idle_time=INVISIBLE_MS, start_id="0-0", count=RECEIVE_MAX)
                entries = claimed[1]
                for entry_id, _ in entries:
                    shared.error(f"{entry_id!r} was pending past {INVISIBLE_MS} ms and delivered again")
            block = None if entries else EMPTY_WAIT_MS
            if not entries:
                continue
            acked = client.xack(STREAM, POP_GROUP, *(entry_id for entry_id, _ in entries))
            if acked != len(entries):
                shared.error(f"XACK acked {acked} of {len(entries)}")
            shared.add(len(entries), [fields[b"id"].decode() for _, fields in entries])
    finally:
        client.close()


def redis_phase(root: str, consumers: int, ids: list[str], args: argparse.Namespace) -> tuple[Phase | None, str]:
    """The peer's drains of the same messages (see redis_rounds), or None and why it could not run."""
    try:
        import redis  # noqa: F401
    except ImportError:
        return None, "redis-py is not installed (pip install -e '.[bench]')"
    peer = RedisStreamsPeer()
    reason = peer.start_or_reason(Path(root))
    if reason is not None:
        return None, reason
    try:
        assert peer.proc is not None
        phase = redis_rounds(peer.port, peer.proc.pid, consumers, ids, args)
        print(f"  {phase.name}: {phase.rate:,.0f} msg/s ({phase.messages:,} in {phase.seconds:.1f} s)", flush=True)
        return phase, f"{peer.version()}: {' '.join(peer.command[1:])}"
    finally:
        peer.stop()


def redis_rounds(port: int, pid: int, consumers: int, ids: list[str], args: argparse.Namespace) -> Phase:
    """Drain the pre-filled stream, again from a fresh stream, until the drains took `args.seconds` in all (at most
    10 rounds): Redis drains the same messages much faster than tidemq, and one short drain is noisy."""
    import redis

    total = Phase("redis XREADGROUP + XACK", 0, 0.0, 0.0, client_cpu_s=0.0)
    for _ in range(10):
        redis.Redis(port=port).flushall()
        redis_prefill(port, ids)
        shared = Shared(target=len(ids))
        workers = [partial(redis_consumer, port, f"c{i}", shared) for i in range(consumers)]
        phase = run_consumers(total.name, workers, shared, pid, args.limit)
        phase.errors += exactly_once(ids, shared.seen)
        total.messages += phase.messages
        total.seconds += phase.seconds
        total.server_cpu_s += phase.server_cpu_s
        total.client_cpu_s += phase.client_cpu_s
        total.errors += phase.errors
        total.distinct = min(total.distinct or phase.distinct, phase.distinct)
        if total.seconds >= args.seconds or phase.errors:
            break
    return total


# Profile of the broker during receive + ack (--profile) -----------------------------------


def start_profile(out: str, pid: int) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the broker's thread holding the GIL (its Python work; the broker is GIL-bound) until stop_profile; None without py-spy."""
    binary = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if binary is None:
        print("py-spy is not installed: no profile", flush=True)
        return None
    argv = [binary, "record", "--gil", "--format", "raw", "--rate", "100", "-o", out, "--pid", str(pid)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached before the phase starts
    return spy


def stop_profile(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    try:
        spy.wait(30)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait(10)


def self_time(path: str) -> tuple[Counter[str], Counter[str], int]:
    """Samples by the innermost frame's function (self) and by every function on the stack (inclusive, once per
    stack), of a py-spy raw (collapsed stacks) file; and the number of samples."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            names = [frame_name(frame) for frame in stack.split(";")]
            own[names[-1]] += int(count)
            inclusive.update(dict.fromkeys(names, int(count)))
            total += int(count)
    return own, inclusive, total


def frame_name(frame: str) -> str:
    """`function (file:line)` as py-spy writes it -> `function (file)`, the file relative to the repository or site-packages."""
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rstrip(")")
    for marker in ("site-packages/", "/lib/python3."):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    else:
        file = os.path.relpath(file, ROOT) if file.startswith("/") else file
    return f"{name} ({file})"


def report_profile(path: str, top: int = 15) -> None:
    if not os.path.exists(path):
        print(f"no profile written to {path}")
        return
    own, inclusive, total = self_time(path)
    print(f"\nProfile of the broker during receive + ack ({path}, {total:,} samples of the thread holding the GIL)")
    print("| function, self time (innermost frame) | share |\n|---|---:|")
    for name, n in own.most_common(top):
        print(f"| {name} | {100 * n / total:.1f} % |")
    print("| function of app/ or store/, inclusive (with what it calls) | share |\n|---|---:|")
    ours = [
        (name, n) for name, n in inclusive.most_common() if name.split(" (", 1)[1].startswith(("app/", "store/")) and name not in WRAPPERS
    ]
    for name, n in ours[:top]:
        print(f"| {name} | {100 * n / total:.1f} % |")


# Report and run ---------------------------------------------------------------------------


def row(label: str, phase: Phase, baseline: float, goal: str = "") -> str:
    cells = [
        label,
        f"{phase.rate:,.0f}",
        f"{phase.cpu_us_per_message:.1f}",
        f"{phase.server_cores:.2f}",
        f"{phase.client_cores:.2f}",
        f"{ratio(phase.rate, baseline):.2f}",
        goal,
        str(len(phase.errors)),
    ]
    return "| " + " | ".join(cells) + " |"


def report(args: argparse.Namespace, tidemq: list[Phase], redis: Phase | None, redis_note: str) -> bool:
    """The table; True when every check passed."""
    before, pop, after = tidemq
    baseline = Phase("offset pull, mean of before and after", before.messages + after.messages, before.seconds + after.seconds,
                     before.server_cpu_s + after.server_cpu_s, client_cpu_s=before.client_cpu_s + after.client_cpu_s)  # fmt: skip
    got = ratio(pop.rate, baseline.rate)
    goal = f">= {GOAL}: {'met' if got >= GOAL else 'NOT met'}"
    print(
        f"\nClients: {args.consumers} threads in this process, one keep-alive connection each: http.client for tidemq, redis-py for Redis;"
    )
    print(f"{RECEIVE_MAX} messages per receive / pull / XREADGROUP; JSON both for receive and pull; bodies of {BODY_BYTES} B.")
    print(f"Peer: {redis_note}")
    print("  Redis Streams consumer groups are the SQS-style semantics installable here (SQS and ElasticMQ are not Debian")
    print("  packages): XREADGROUP hands each entry to one consumer and keeps it pending until XACK; XAUTOCLAIM redelivers")
    print(f"  a pending entry idle past {INVISIBLE_MS} ms (the visibility timeout; tidemq's invisible_ms is the same).")
    print("Server CPU: utime + stime of the broker / redis-server process during the phase, per message and in cores;")
    print("client cores: CPU of this process (the consumer threads) meanwhile. The two share the machine's cores.")
    print("| figure | msg/s | server CPU us/msg | server cores | client cores | / offset pull | goal | errors |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    print(row(f"tidemq offset pull (JSON) + commit, {args.consumers} consumers, before", before, baseline.rate))
    print(row("tidemq offset pull (JSON) + commit, after", after, baseline.rate))
    print(row("tidemq offset pull, baseline (both runs)", baseline, baseline.rate))
    print(row(f"tidemq receive + ack, {args.consumers} consumers", pop, baseline.rate, goal))
    if redis is not None:
        print(row(f"redis XREADGROUP + XACK, {args.consumers} consumers", redis, baseline.rate))
        print(f"tidemq receive + ack / redis XREADGROUP + XACK: {ratio(pop.rate, redis.rate):.2f} in msg/s, "
              f"{ratio(pop.cpu_us_per_message, redis.cpu_us_per_message):.1f}x the server CPU per message")  # fmt: skip
    else:
        print("redis XREADGROUP + XACK: not run")
    ok = True
    for phase in [*tidemq, *([redis] if redis is not None else [])]:
        for error in phase.errors[:5]:
            print(f"ERROR in {phase.name}: {error}")
        ok = ok and not phase.errors
    print(f"Exactly once: receive + ack acked {pop.distinct:,} distinct msg_ids in {pop.messages:,} acks, of {args.messages:,} pre-filled"
          + (f"; redis {redis.distinct:,} (fewest of a round) in {redis.messages:,} XACKed entries over its rounds" if redis is not None else "")
          + f"; {'no errors' if ok else 'ERRORS above'}")  # fmt: skip
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test: 2 s pulls, 8,000 messages")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of each offset-pull measurement")
    parser.add_argument("--messages", type=int, default=100_000, help="pre-filled messages, drained by receive + ack and by Redis")
    parser.add_argument("--consumers", type=int, default=8, help="concurrent consumers of every phase")
    parser.add_argument("--queues", type=int, default=8, help="queues of the topic (consumer i pulls queue i %% queues)")
    parser.add_argument("--limit", type=float, default=300.0, help="longest a drain may take, in seconds")
    parser.add_argument(
        "--profile", metavar="FILE", help="py-spy record the broker during receive + ack into FILE (raw) and print its top costs"
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.messages = min(args.seconds, 2.0), min(args.messages, 8_000)
    print(f"load average {load_average()}; {os.cpu_count()} cores; {args.consumers} consumers; {args.queues} queues", flush=True)
    with tempfile.TemporaryDirectory(prefix="tidemq-pop-bench-") as root:
        os.makedirs(os.path.join(root, "tidemq"))
        tidemq, ids = tidemq_phases(os.path.join(root, "tidemq"), args)
        redis, note = redis_phase(root, args.consumers, ids, args)
    ok = report(args, tidemq, redis, note)
    if args.profile:
        report_profile(args.profile)
    print(f"load average at the end {load_average()}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
