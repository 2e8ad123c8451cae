"""A history checker for a broker group under faults: clients record every operation, checks run afterwards.

`History` is an operation log: each `Op` has a kind, the worker and broker that ran it, when it was
invoked and completed, its HTTP status (None: no reply) and kind-specific values. Workers (`Workload`)
append to it while a test injects faults (`History.faults`: SIGKILLs and SIGSTOPs of masters) and a
`Monitor` samples each broker's `/v1/store` cluster status. Afterwards `check()` runs one function
per operation kind (`CHECKS`) and the cross-cutting ones against the `Final` state (the surviving log
and the group's epoch history in etcd), and returns every problem found.

To add an operation kind: record `Op`s of the new kind from a worker (a function like `produce_once`),
add what the final state needs to `Final` (read in `read_final`), and add `CHECKS["kind"] = check_kind`.

Checks:
- produce: every acknowledged (2xx) produce is in the surviving log exactly once, at the commitlog
  and queue offsets its reply named; it was accepted by the master of the epoch its offset lies in
  (the epoch history in etcd), so no broker but an epoch's master accepted a put of that epoch;
- read: every message read was produced (a read returns no invented or torn message); a queue offset
  read twice with different messages never held an acknowledged one the first time;
- epochs (the monitor): never two brokers accepting writes in one epoch;
- commit and offsets (consumer state, replicated as state records): a committed offset read after a
  commit of it answered 2xx is never lower (no failover takes a commit back), unless the surviving log
  shows an unanswered commit of the lower offset applied after it (`check_offsets` says why that is right);
- receive and ack (group consumption: checkpoints and acks in the revive topic, the revive progress as
  an offset): no message is delivered again after an ack of it answered OK; every acknowledged
  produce is delivered to the group; a message received and not acked (the ack not sent, or refused)
  is delivered again (an ack cut without a reply may or may not have been stored: either is right);
- failover window: after each fault of a master, a put is accepted by another broker within `window_s`.
"""

from __future__ import annotations

import json
import random
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cluster.etcd_client import EtcdClient
from store.codec.message import PROPERTY_UNIQ_KEY, TIMER_TOPIC
from store.codec.message_codec import decode_message
from store.layouts import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE
from store.state.state_log import STATE_TOPIC
from store.state.state_table import StateKind
from store.timer.timer_message import PROPERTY_TIMER_OUT_MS

TOPIC = "history"
QUEUES = 2
GROUP = "ledger"  # the consumer group that receives and acks
COMMIT_GROUP = "auditor"  # the group whose offsets a worker commits
INVISIBLE_MS = 3_000
# One message of this many received is left unacked, to be delivered again.
UNACKED_EVERY = 4
# A refused or failed request is retried this much later (not at once: two cores serve the brokers too).
RETRY_PAUSE_S = 0.01
# Between two produces of one worker: a steady load, not all the two cores can give (the elections' timing is checked).
PRODUCE_PAUSE_S = 0.005
# A worker's longest wait for one reply; a broker that gave none (or refused the connection) is avoided this long,
# as a client that knows the other brokers of the route would (a paused broker would hold every worker otherwise).
REQUEST_TIMEOUT_S = 1.0
AVOID_S = 5.0
# The reply header naming the broker that served a consumer-state request, its role and epoch (cluster/forwarding.py).
SERVED_BY = "tidemq-served-by"


@dataclass
class Op:
    kind: str
    worker: str
    node: str
    invoked: float
    completed: float = 0.0
    status: int | None = None
    value: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass
class Fault:
    kind: str  # "kill" or "stop"
    node: str
    at: float


@dataclass
class Sample:
    node: str
    at: float
    role: str
    epoch: int
    accepting: bool


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.faults: list[Fault] = []
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        # Wall-clock seconds at monotonic 0: a broker's log and its records' store timestamps are wall-clock.
        self.wall_offset = time.time() - time.monotonic()

    def record(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)

    def of(self, kind: str) -> list[Op]:
        with self._lock:
            return [op for op in self.ops if op.kind == kind]

    def acked_produces(self) -> list[Op]:
        return [op for op in self.of("produce") if op.ok]

    def dump(self, path: Path, records: list[dict[str, Any]] | None = None) -> None:
        """Every fault, sample and operation (and `records`: what the final log holds, e.g. `commit_records`), one JSON
        object a line in time order, each with its wall-clock time too: what a failed check is read against."""
        with self._lock:
            rows: list[dict[str, Any]] = [{"at": f.at, "fault": asdict(f)} for f in self.faults]
            rows += [{"at": s.at, "sample": asdict(s)} for s in self.samples]
            rows += [{"at": op.invoked, "op": asdict(op)} for op in self.ops]
        rows += [{"at": r["store_timestamp"] / 1000.0 - self.wall_offset, "record": r} for r in records or []]
        with open(path, "w") as out:
            for row in sorted(rows, key=lambda r: r["at"]):
                row["wall"] = utc_text(row["at"] + self.wall_offset)
                out.write(json.dumps(row, default=str) + "\n")

    def deliveries(self) -> dict[str, list[Op]]:
        """Message id -> the receives that delivered it, in completion order."""
        out: dict[str, list[Op]] = {}
        for op in sorted(self.of("receive"), key=lambda o: o.completed):
            for message_id in op.value.get("ids", []):
                out.setdefault(message_id, []).append(op)
        return out


def utc_text(wall_s: float) -> str:
    """A wall-clock time as the brokers' log lines print theirs (UTC, milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall_s)) + f".{int(wall_s * 1000) % 1000:03d}Z"


@dataclass
class Final:
    """What the group holds once every broker is back: each queue's messages (queue offset -> (id, commitlog offset)),
    and the epoch history: [(epoch, master broker id, start offset)] in epoch order."""

    queues: dict[int, dict[int, tuple[str, int]]]
    epochs: list[tuple[int, str, int]]
    # The offset commits of COMMIT_GROUP in the surviving log, (queue, offset) in log order (`commit_records`), when read.
    offset_commits: list[tuple[int, int]] = field(default_factory=list)


# Workers --------------------------------------------------------------------------------------------


def broker_of(offset_msg_id: str) -> str:
    """The HTTP URL of the broker that stored a message: its offset message id names the store's IPv4 host and port."""
    host = ".".join(str(int(offset_msg_id[i : i + 2], 16)) for i in range(0, 8, 2))
    return f"http://{host}:{int(offset_msg_id[8:16], 16)}"


def produce_once(history: History, worker: str, client: httpx.Client, node: str, message_id: str, queue: int) -> Op:
    op = Op("produce", worker, node, time.monotonic(), value={"id": message_id, "queue": queue})
    try:
        r = client.post(f"{node}/v1/topics/{TOPIC}/messages", json={"body": message_id, "queue_id": queue})
        op.status = r.status_code
        if r.status_code == 201:
            reply = r.json()
            op.value.update(broker=broker_of(reply["offset_msg_id"]), commitlog_offset=reply["commitlog_offset"])
            op.value["queue_offset"] = reply["queue_offset"]
        else:
            op.value["code"] = r.json().get("code") if r.headers.get("content-type", "").endswith("json") else None
    except httpx.TransportError as exc:
        op.value["error"] = type(exc).__name__
    op.completed = time.monotonic()
    history.record(op)
    return op


def read_once(history: History, worker: str, client: httpx.Client, node: str, queue: int, offset: int) -> Op:
    op = Op("read", worker, node, time.monotonic(), value={"queue": queue, "offset": offset, "messages": []})
    try:
        r = client.get(f"{node}/v1/topics/{TOPIC}/queues/{queue}/messages", params={"offset": offset, "max": 64})
        op.status = r.status_code
        if r.status_code == 200:
            reply = r.json()
            op.value["messages"] = [(m["queue_offset"], m["body"], m["commitlog_offset"]) for m in reply["messages"]]
            op.value["next_offset"] = reply["next_offset"]
    except httpx.TransportError as exc:
        op.value["error"] = type(exc).__name__
    op.completed = time.monotonic()
    history.record(op)
    return op


def commit_once(history: History, worker: str, client: httpx.Client, node: str, queue: int, offset: int) -> Op:
    op = Op("commit", worker, node, time.monotonic(), value={"queue": queue, "offset": offset})
    try:
        r = client.put(f"{node}/v1/groups/{COMMIT_GROUP}/offsets", json={"topic": TOPIC, "queue_id": queue, "offset": offset})
        op.status = r.status_code
        op.value["served_by"] = r.headers.get(SERVED_BY)
        if not op.ok:
            op.value["code"] = _code(r)
    except httpx.TransportError as exc:
        op.value["error"] = type(exc).__name__
    op.completed = time.monotonic()
    history.record(op)
    return op


def offsets_once(history: History, worker: str, client: httpx.Client, node: str) -> Op:
    op = Op("offsets", worker, node, time.monotonic(), value={"committed": {}})
    try:
        r = client.get(f"{node}/v1/groups/{COMMIT_GROUP}/offsets", params={"topic": TOPIC})
        op.status = r.status_code
        op.value["served_by"] = r.headers.get(SERVED_BY)
        if r.status_code == 200:
            op.value["committed"] = {q["queue_id"]: q["committed_offset"] for q in r.json()["queues"]}
    except httpx.TransportError as exc:
        op.value["error"] = type(exc).__name__
    op.completed = time.monotonic()
    history.record(op)
    return op


def receive_once(history: History, worker: str, client: httpx.Client, node: str, wait_ms: int = 0) -> tuple[Op, list[tuple[str, str]]]:
    """A receive's op and its (message id, receipt handle) pairs."""
    op = Op("receive", worker, node, time.monotonic(), value={"ids": []})
    got: list[tuple[str, str]] = []
    try:
        params = {"max": 16, "invisible_ms": INVISIBLE_MS, "wait_ms": wait_ms}
        r = client.post(f"{node}/v1/groups/{GROUP}/topics/{TOPIC}/receive", params=params)
        op.status = r.status_code
        if r.status_code == 200:
            got = [(m["body"], m["receipt_handle"]) for m in r.json()["messages"]]
            op.value["ids"] = [message_id for message_id, _ in got]
    except httpx.TransportError as exc:
        op.value["error"] = type(exc).__name__
    op.completed = time.monotonic()
    history.record(op)
    return op, got


# 5xx codes that mean nothing was stored (a client may count on the message coming again).
NOTHING_STORED = frozenset({"NO_MASTER", "NOT_ENOUGH_REPLICAS", "SHUTTING_DOWN"})


def _code(r: httpx.Response) -> str | None:
    return r.json().get("code") if r.headers.get("content-type", "").endswith("json") else None


def ack_once(history: History, worker: str, client: httpx.Client, node: str, pairs: list[tuple[str, str]]) -> Op:
    """Ack `pairs`; the op's value holds each id's outcome ("OK", another status, or None when no reply came)."""
    op = Op("ack", worker, node, time.monotonic(), value={"outcomes": {message_id: None for message_id, _ in pairs}})
    try:
        r = client.post(f"{node}/v1/groups/{GROUP}/topics/{TOPIC}/ack", json={"receipt_handles": [h for _, h in pairs]})
        op.status = r.status_code
        if r.status_code == 200:
            for (message_id, _), result in zip(pairs, r.json()["results"], strict=True):
                op.value["outcomes"][message_id] = result["status"]
        elif r.status_code < 500 or _code(r) in NOTHING_STORED:
            op.value["outcomes"] = {message_id: "REFUSED" for message_id, _ in pairs}
        # Else (FORWARD_FAILED: the owner did not answer; a 5xx with "stored": true): stored or not is unknown.
    except httpx.TransportError as exc:
        op.value["error"] = type(exc).__name__
    op.completed = time.monotonic()
    history.record(op)
    return op


class Workload:
    """Producer, reader, committer and consumer threads, each sending to a broker chosen at random per request
    (any broker takes any)."""

    def __init__(
        self, history: History, nodes: Callable[[], list[str]], producers: int = 3, readers: int = 1, consumers: int = 0,
        committers: int = 0,
    ) -> None:  # fmt: skip
        self.history = history
        self.nodes = nodes
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._produce, args=(f"p{i}",), daemon=True) for i in range(producers)]
        self.threads += [threading.Thread(target=self._read, args=(f"r{i}",), daemon=True) for i in range(readers)]
        self.threads += [threading.Thread(target=self._consume, args=(f"c{i}",), daemon=True) for i in range(consumers)]
        self.threads += [threading.Thread(target=self._commit, args=(f"o{i}",), daemon=True) for i in range(committers)]

    def __enter__(self) -> Workload:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(30)

    def _choose(self, rng: random.Random, avoided: dict[str, float]) -> str:
        now = time.monotonic()
        nodes = self.nodes()
        return rng.choice([n for n in nodes if avoided.get(n, 0.0) <= now] or nodes)

    def _produce(self, worker: str) -> None:
        rng = random.Random(worker)
        avoided: dict[str, float] = {}
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            n = 0
            while not self.stopping.is_set():
                op = produce_once(self.history, worker, client, self._choose(rng, avoided), f"{worker}-{n}", n % QUEUES)
                n += 1
                if op.status is None:
                    avoided[op.node] = time.monotonic() + AVOID_S
                self.stopping.wait(PRODUCE_PAUSE_S if op.ok else RETRY_PAUSE_S)

    def _read(self, worker: str) -> None:
        rng = random.Random(worker)
        avoided: dict[str, float] = {}
        cursors = [0] * QUEUES
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            while not self.stopping.is_set():
                queue = rng.randrange(QUEUES)
                op = read_once(self.history, worker, client, self._choose(rng, avoided), queue, cursors[queue])
                if op.status is None:
                    avoided[op.node] = time.monotonic() + AVOID_S
                if op.ok and op.value["messages"]:
                    cursors[queue] = op.value["next_offset"]
                else:
                    self.stopping.wait(0.05)

    def _consume(self, worker: str) -> None:
        rng = random.Random(worker)
        avoided: dict[str, float] = {}
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            n = 0
            while not self.stopping.is_set():
                op, got = receive_once(self.history, worker, client, self._choose(rng, avoided))
                if op.status is None:
                    avoided[op.node] = time.monotonic() + AVOID_S
                acked = []
                for pair in got:
                    n += 1
                    if n % UNACKED_EVERY:
                        acked.append(pair)
                if acked:
                    ack = ack_once(self.history, worker, client, self._choose(rng, avoided), acked)
                    if ack.status is None:
                        avoided[ack.node] = time.monotonic() + AVOID_S
                if not got:
                    self.stopping.wait(0.05)

    def _commit(self, worker: str) -> None:
        """Commits growing offsets of each queue in turn, and reads them back between commits."""
        rng = random.Random(worker)
        avoided: dict[str, float] = {}
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            n = 0
            while not self.stopping.is_set():
                n += 1
                commit = commit_once(self.history, worker, client, self._choose(rng, avoided), n % QUEUES, n // QUEUES)
                if commit.status is None:
                    avoided[commit.node] = time.monotonic() + AVOID_S
                read = offsets_once(self.history, worker, client, self._choose(rng, avoided))
                if read.status is None:
                    avoided[read.node] = time.monotonic() + AVOID_S
                self.stopping.wait(0.02)


def drain(history: History, node: str, deadline_s: float) -> None:
    """Receive and ack everything left (no faults now), until every acknowledged produce was delivered and acked
    (or its ack was cut without a reply: stored or not, it need not come again)."""
    wanted = {op.value["id"] for op in history.acked_produces()}
    deadline = time.monotonic() + deadline_s
    with httpx.Client(timeout=10.0) as client:
        while time.monotonic() < deadline:
            outcomes = [(m, outcome) for op in history.of("ack") for m, outcome in op.value["outcomes"].items()]
            acked = {m for m, outcome in outcomes if outcome == "OK"}
            unknown = {m for m, outcome in outcomes if outcome is None}
            if wanted - unknown <= acked:
                return
            _, got = receive_once(history, "drain", client, node, wait_ms=1_000)
            if got:
                ack_once(history, "drain", client, node, got)


class Monitor:
    """One thread per broker sampling its `/v1/store` cluster status (role, epoch, accepting writes)."""

    def __init__(self, history: History, nodes: list[str], interval_s: float = 0.05) -> None:
        self.history, self.nodes, self.interval_s = history, nodes, interval_s
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._watch, args=(n,), daemon=True) for n in nodes]

    def __enter__(self) -> Monitor:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(10)

    def _watch(self, node: str) -> None:
        with httpx.Client(timeout=0.5) as client:
            while not self.stopping.is_set():
                at = time.monotonic()
                try:
                    status = client.get(f"{node}/v1/store").json().get("cluster") or {}
                except (httpx.HTTPError, ValueError):
                    status = {}
                if status:
                    sample = Sample(node, at, status["role"], int(status["epoch"]), bool(status["accepting_puts"]))
                    with self.history._lock:
                        self.history.samples.append(sample)
                self.stopping.wait(self.interval_s)


# The final state ------------------------------------------------------------------------------------


def read_queue(client: httpx.Client, node: str, queue: int) -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    offset = 0
    while True:
        r = client.get(
            f"{node}/v1/topics/{TOPIC}/queues/{queue}/messages",
            params={"offset": offset, "max": 256},
            headers={"tidemq-forwarded-by": "history"},  # this broker's own log
        )
        r.raise_for_status()
        reply = r.json()
        for m in reply["messages"]:
            out[m["queue_offset"]] = (m["body"], m["commitlog_offset"])
        if not reply["messages"] or reply["next_offset"] >= reply["max_offset"]:
            return out
        offset = reply["next_offset"]


def read_final(node: str, etcd_url: str, cluster: str, group: str) -> Final:
    with httpx.Client(timeout=10.0) as client:
        queues = {q: read_queue(client, node, q) for q in range(QUEUES)}
    etcd = EtcdClient([etcd_url], 2_000)
    try:
        kvs = etcd.prefix(f"/tidemq/{cluster}/groups/{group}/epochs/")
    finally:
        etcd.close()
    epochs = sorted((int(kv.value["epoch"]), str(kv.value["broker"]), int(kv.value["start_offset"])) for kv in kvs)
    return Final(queues, epochs)


def log_messages(store_dir: Path) -> Any:
    """Every message in a broker's commitlog, decoded, in log order. Read from the files (a stopped broker's,
    or a running one's written part)."""
    for path in sorted((store_dir / "commitlog").iterdir()):
        data = path.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">iI", data, pos)
            if size <= 0 or pos + size > len(data) or magic not in (MESSAGE_MAGIC_CODE, BLANK_MAGIC_CODE):
                break
            if magic == MESSAGE_MAGIC_CODE:
                yield decode_message(data, pos)
            pos += size


def commit_records(store_dir: Path, group: str = COMMIT_GROUP) -> list[dict[str, Any]]:
    """The offset commits of `group` (state records of consumer offsets) in a broker's commitlog, in log order: the
    order its master applied them in."""
    key = f"{TOPIC}@{group}"
    out = []
    for m in log_messages(store_dir):
        if m["topic"] == STATE_TOPIC and m["queue_id"] == int(StateKind.CONSUMER_OFFSETS):
            commits = json.loads(m["body"]).get("c") or []
            for k, queue, offset in commits:
                if k == key:
                    out.append({"commitlog_offset": m["commitlog_offset"], "store_timestamp": m["store_timestamp"],
                                "store_host": m["store_host"], "queue": queue, "offset": offset})  # fmt: skip
    return out


def timer_deliveries_twice(store_dir: Path) -> list[str]:
    """The timer messages (the group's checkpoints and acks among them) a broker's log holds two delivered copies of.
    A new master checks each unit its old master may have delivered after its last progress record against the
    index; a copy delivered twice revives its checkpoint twice, and the second brings back what was acked since."""
    seen: dict[tuple[str, str], int] = {}
    for m in log_messages(store_dir):
        props = m["properties"]
        if m["topic"] != TIMER_TOPIC and PROPERTY_TIMER_OUT_MS in props and PROPERTY_UNIQ_KEY in props:
            key = (m["topic"], props[PROPERTY_UNIQ_KEY])
            seen[key] = seen.get(key, 0) + 1
    return [f"{topic} {uniq_key} delivered {n} times" for (topic, uniq_key), n in seen.items() if n > 1]


# Checks ---------------------------------------------------------------------------------------------


def epoch_at(epochs: list[tuple[int, str, int]], offset: int) -> tuple[int, str]:
    """The epoch (and its master) whose part of the log holds `offset`: the last one starting at or before it."""
    found = epochs[0]
    for entry in epochs:
        if entry[2] <= offset:
            found = entry
    return found[0], found[1]


def check_produces(history: History, final: Final) -> list[str]:
    problems = []
    where: dict[str, list[tuple[int, int, int]]] = {}
    for queue, messages in final.queues.items():
        for queue_offset, (message_id, commitlog_offset) in messages.items():
            where.setdefault(message_id, []).append((queue, queue_offset, commitlog_offset))
    for op in history.acked_produces():
        v = op.value
        found = where.get(v["id"], [])
        if found != [(v["queue"], v["queue_offset"], v["commitlog_offset"])]:
            problems.append(f"acknowledged produce {v['id']} (queue {v['queue']} offset {v['queue_offset']}) is in the log at {found}")
            continue
        epoch, master = epoch_at(final.epochs, v["commitlog_offset"])
        if v["broker"] != master:
            problems.append(f"produce {v['id']} at {v['commitlog_offset']}, in epoch {epoch} of {master}, was accepted by {v['broker']}")
    return problems


def check_reads(history: History, final: Final) -> list[str]:
    problems = []
    produced = {op.value["id"] for op in history.of("produce")}
    acked = {op.value["id"] for op in history.acked_produces()}
    seen: dict[tuple[int, int], str] = {}
    for op in sorted(history.of("read"), key=lambda o: o.completed):
        for queue_offset, message_id, _ in op.value["messages"]:
            if message_id not in produced:
                problems.append(f"read {message_id!r} at queue {op.value['queue']} offset {queue_offset}, which nobody produced")
            before = seen.setdefault((op.value["queue"], queue_offset), message_id)
            if before != message_id and before in acked:
                problems.append(f"queue {op.value['queue']} offset {queue_offset} held acknowledged {before}, later {message_id}")
            seen[(op.value["queue"], queue_offset)] = message_id
    return problems


def unanswered(op: Op) -> bool:
    """Whether the client cannot know if this write took effect: no reply, or a 5xx other than those that store nothing."""
    return op.status is None or (op.status >= 500 and op.value.get("code") not in NOTHING_STORED)


def applied_late(final: Final, queue: int, value: int, acknowledged: int) -> bool:
    """Whether the surviving log holds a commit of `value` after one of `acknowledged` (same queue), so its master
    applied the lower commit last."""
    position = {entry: i for i, entry in enumerate(final.offset_commits)}  # each offset is committed once: its last position
    late, first = position.get((queue, value)), position.get((queue, acknowledged))
    return late is not None and first is not None and late > first


def check_offsets(history: History, final: Final) -> list[str]:
    """A committed offset read back is never below one whose commit answered 2xx before the read began.

    Save one case: a commit the client got no answer for (it gave up after REQUEST_TIMEOUT_S, or a broker forwarding
    it answered FORWARD_FAILED) may still take effect at any time later, a forwarding broker or the master's thread
    pool having held it, and then after a later commit of the same committer that was answered; the read then sees the
    older offset, rightly (a commit sets the offset, it does not raise it). It is let pass only when the surviving log
    shows exactly that: the unanswered commit's record after the answered one's."""
    problems = []
    commits = sorted((op for op in history.of("commit") if op.ok), key=lambda o: o.completed)
    unknown = {(op.value["queue"], op.value["offset"]): op for op in history.of("commit") if unanswered(op)}
    for read in history.of("offsets"):
        if not read.ok:
            continue
        for queue in range(QUEUES):
            before = [c for c in commits if c.value["queue"] == queue and c.completed < read.invoked]
            value = read.value["committed"].get(queue, -1)
            if before and value < max(c.value["offset"] for c in before):
                last = max(before, key=lambda c: c.value["offset"])
                late = unknown.get((queue, value))
                if late is not None and late.invoked < read.completed and applied_late(final, queue, value, last.value["offset"]):
                    continue
                problems.append(
                    f"queue {queue}: offset {value} read from {read.node} ({read.value.get('served_by')}) at {read.invoked:.2f} "
                    f"after a commit of {last.value['offset']} answered OK by {last.node} ({last.value.get('served_by')}) "
                    f"at {last.completed:.2f}"
                )
    return problems


def check_consumption(history: History, final: Final) -> list[str]:
    """No delivery after an ack answered OK; every acknowledged produce delivered and finally acked; every
    message received and not acked delivered again."""
    problems = []
    deliveries = history.deliveries()
    acked_at: dict[str, float] = {}
    attempted: set[str] = set()
    unknown: set[str] = set()
    for op in history.of("ack"):
        for message_id, outcome in op.value["outcomes"].items():
            attempted.add(message_id)
            if outcome == "OK":
                acked_at[message_id] = min(acked_at.get(message_id, op.completed), op.completed)
            elif outcome is None:
                unknown.add(message_id)
    for message_id, acked in acked_at.items():
        later = [op for op in deliveries.get(message_id, []) if op.invoked > acked]
        if later:
            problems.append(
                f"{message_id} delivered again at {later[0].invoked:.2f} by {later[0].node} after its ack answered OK at {acked:.2f}"
            )
    for op in history.acked_produces():
        message_id = op.value["id"]
        if message_id not in deliveries:
            problems.append(f"acknowledged produce {message_id} was never delivered to group {GROUP}")
        elif message_id not in acked_at and message_id not in unknown:
            where = [f"{d.node}@{d.completed:.2f}" for d in deliveries[message_id]]
            problems.append(f"{message_id} was received ({', '.join(where)}) but never delivered again to be acked")
    return problems


CHECKS: dict[str, Callable[[History, Final], list[str]]] = {
    "produce": check_produces, "read": check_reads, "offsets": check_offsets, "receive": check_consumption,
}  # fmt: skip


def check_one_writer_per_epoch(history: History) -> list[str]:
    writers: dict[int, set[str]] = {}
    for s in history.samples:
        if s.accepting:
            writers.setdefault(s.epoch, set()).add(s.node)
    return [f"epoch {epoch}: {sorted(nodes)} all accepted writes" for epoch, nodes in writers.items() if len(nodes) > 1]


def failover_windows(history: History) -> list[float]:
    """Per fault: seconds from it until a put is accepted by another broker (inf when none was)."""
    windows = []
    for fault in history.faults:
        accepted = [op.completed for op in history.acked_produces() if op.completed > fault.at and op.value["broker"] != fault.node]
        windows.append(min(accepted) - fault.at if accepted else float("inf"))
    return windows


def check(history: History, final: Final, window_s: float) -> list[str]:
    problems = [p for kind, fn in CHECKS.items() if history.of(kind) for p in fn(history, final)]
    problems += check_one_writer_per_epoch(history)
    for fault, window in zip(history.faults, failover_windows(history), strict=True):
        if window > window_s:
            problems.append(f"{fault.kind} of {fault.node}: the next put accepted elsewhere came after {window:.2f} s")
    return problems
