"""An ack that answered OK stays acked through SIGKILLs: 30 rounds of producing, receiving and acking
under SYNC flush, each ended by a SIGKILL of the broker, then a drain.

The history afterwards: every produce answered 201 is delivered, and acked by the drain unless an
ack of it was cut by a kill (its outcome unknown to the client: the broker may hold it); no
message is delivered again after an ack of it answered OK (its checkpoint and ack records,
replayed by the timer after each restart, are matched before anything is revived).
Real broker process on loopback, real files.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess

TOPIC = "ledger"
GROUP = "auditors"
ROUNDS = 30
ROUND_S = 0.4
INVISIBLE_MS = 2_000
DRAIN_S = 40.0


class History:
    """What the clients saw: produces answered 201, and per body its deliveries and the time its first ack answered OK."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.produced: set[str] = set()
        self.deliveries: dict[str, list[float]] = {}
        self.seen: dict[str, list[tuple[str, int, int, int]]] = {}  # body -> (topic, queue, offset, reconsume times) per delivery
        self.acked_at: dict[str, float] = {}
        self.ack_unknown: set[str] = set()  # an ack of it was cut by the kill: stored or not, the client cannot tell

    def delivered(self, m: dict[str, Any], at: float) -> None:
        with self.lock:
            self.deliveries.setdefault(m["body"], []).append(at)
            self.seen.setdefault(m["body"], []).append((m["topic"], m["queue_id"], m["queue_offset"], m["reconsume_times"]))

    def acked(self, body: str, at: float) -> None:
        with self.lock:
            self.acked_at.setdefault(body, at)

    def settled(self) -> bool:
        """Every produce is delivered, and acked unless an ack of it was cut."""
        with self.lock:
            return self.produced <= set(self.deliveries) and self.produced - self.ack_unknown <= set(self.acked_at)

    def redelivered_after_ack(self) -> dict[str, int]:
        """Per acked body, how many deliveries came after its first ack answered OK."""
        return {body: sum(1 for t in self.deliveries.get(body, []) if t > acked) for body, acked in self.acked_at.items()}


def produce_until(url: str, stop: threading.Event, history: History, tag: str) -> None:
    with httpx.Client(base_url=url, timeout=5.0) as c:
        i = 0
        while not stop.is_set():
            body = f"{tag}-{i}"
            i += 1
            try:
                r = c.post(f"/v1/topics/{TOPIC}/messages", json={"body": body})
            except httpx.HTTPError:
                return  # the broker is gone
            if r.status_code == 201:
                with history.lock:
                    history.produced.add(body)


def consume_until(url: str, stop: threading.Event, history: History) -> None:
    with httpx.Client(base_url=url, timeout=5.0) as c:
        while not stop.is_set():
            try:
                consume_once(c, history, wait_ms=100)
            except httpx.HTTPError:
                return


def consume_once(c: httpx.Client, history: History, wait_ms: int) -> int:
    r = c.post(f"/v1/groups/{GROUP}/topics/{TOPIC}/receive", params={"max": 16, "invisible_ms": INVISIBLE_MS, "wait_ms": wait_ms})
    if r.status_code != 200:
        return 0
    messages: list[dict[str, Any]] = r.json()["messages"]
    now = time.monotonic()
    for m in messages:
        history.delivered(m, now)
    if not messages:
        return 0
    try:
        a = c.post(f"/v1/groups/{GROUP}/topics/{TOPIC}/ack", json={"receipt_handles": [m["receipt_handle"] for m in messages]})
    except httpx.HTTPError:
        with history.lock:
            history.ack_unknown.update(m["body"] for m in messages)
        raise
    if a.status_code == 200:
        answered = time.monotonic()
        for m, result in zip(messages, a.json()["results"], strict=True):
            if result["status"] == "OK":
                history.acked(m["body"], answered)
    return len(messages)


@pytest.mark.slow
def test_no_message_is_delivered_again_after_its_ack_answered_ok_across_sigkills(tmp_path: Path) -> None:
    config = SMALL_STORE + 'flush_disk_type = "SYNC_FLUSH"\n' + SMALL_BROKER
    broker = BrokerProcess(tmp_path / "store", config)
    history = History()
    try:
        broker.start()
        assert broker.client is not None
        assert broker.client.put(f"/v1/topics/{TOPIC}", json={"queues": 4}).status_code == 201
        for round_ in range(ROUNDS):
            if round_:
                broker.start()
            stop = threading.Event()
            workers = [threading.Thread(target=produce_until, args=(broker.url, stop, history, f"r{round_}p{k}")) for k in range(2)]
            workers += [threading.Thread(target=consume_until, args=(broker.url, stop, history)) for _ in range(2)]
            for w in workers:
                w.start()
            time.sleep(ROUND_S)  # the round's length: the kill lands with work in flight
            broker.kill()  # SIGKILL, with produces, receives and acks in flight
            stop.set()
            for w in workers:
                w.join(10)
        broker.start()
        assert broker.client is not None
        deadline = time.monotonic() + DRAIN_S
        while not history.settled() and time.monotonic() < deadline:
            consume_once(broker.client, history, wait_ms=500)
    finally:
        broker.kill()
    missing = history.produced - set(history.deliveries)
    assert not missing, f"{len(missing)} acknowledged produce(s) never delivered, e.g. {sorted(missing)[:5]}"
    unacked = history.produced - history.ack_unknown - set(history.acked_at)
    assert not unacked, f"{len(unacked)} message(s) received but never delivered again to be acked, e.g. {sorted(unacked)[:5]}"
    again = {body: n for body, n in history.redelivered_after_ack().items() if n}
    examples = {body: history.seen[body] for body in sorted(again)[:5]}
    assert not again, f"{len(again)} message(s) delivered again after an ack answered OK, e.g. {examples}"
    assert len(history.produced) > ROUNDS  # the rounds did real work
