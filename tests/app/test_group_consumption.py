"""Group consumption over HTTP, black-box: receive, ack, invisible time, redelivery, dead letters, FIFO, crashes.

A broker of its own with a short ack margin so that redelivery comes about a second after the
shortest invisible time (1 s); waits poll with deadlines and assert no duration.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker, running_broker
from tests.app.helpers import problem, send
from tests.app.in_process import InProcessBroker
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)
POP_STORE = SMALL_STORE + "pop_ack_margin_ms = 100\npop_revive_interval_ms = 20\n"


@pytest.fixture(scope="module")
def pop_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | InProcessBroker]:
    yield from running_broker(tmp_path_factory, "pop", POP_STORE + SMALL_BROKER)


@pytest.fixture
def c(pop_broker: BrokerProcess | InProcessBroker) -> httpx.Client:
    assert pop_broker.client is not None
    return pop_broker.client


def base(group: str, topic: str) -> str:
    return f"/v1/groups/{group}/topics/{topic}"


def receive(c: httpx.Client, group: str, topic: str, **params: Any) -> list[dict[str, Any]]:
    r = c.post(base(group, topic) + "/receive", params=params)
    assert r.status_code == 200, r.text
    messages: list[dict[str, Any]] = r.json()["messages"]
    return messages


def receive_until(
    c: httpx.Client,
    group: str,
    topic: str,
    want: int,
    timeout_s: float = 20,
    **params: Any,
) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want:
        assert time.monotonic() < deadline, f"got {[m['body'] for m in got]}, wanted {want}"
        got += receive(c, group, topic, max=want - len(got), wait_ms=1000, **params)
    return got


def ack(c: httpx.Client, group: str, topic: str, handles: list[str]) -> list[str]:
    r = c.post(base(group, topic) + "/ack", json={"receipt_handles": handles})
    assert r.status_code == 200, r.text
    return [x["status"] for x in r.json()["results"]]


def create(c: httpx.Client, topic: str, queues: int = 2) -> None:
    assert c.put(f"/v1/topics/{topic}", json={"queues": queues}).status_code == 201


def test_a_group_whose_retry_topic_name_would_be_too_long_is_refused_before_anything_is_taken(c: httpx.Client) -> None:
    """`%RETRY%{group}_{topic}` must be a topic (at most 127 bytes): otherwise an unacked message could never come
    back. Such a receive (and push subscription) is 400 GROUP_INVALID, and nothing is taken from the queue."""
    topic, group = "t" * 100, "g" * 30
    create(c, topic, queues=1)
    assert c.post(f"/v1/topics/{topic}/messages", json={"body": "kept", "queue_id": 0}).status_code == 201
    for r in (
        c.post(base(group, topic) + "/receive", params={"max": 1, "invisible_ms": 1000}),
        c.put(f"/v1/groups/{group}/push", json={"topic": topic, "url": "http://127.0.0.1:9/hook", "secret": "s" * 32}),
    ):
        assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json", r.text
        assert r.json()["code"] == "GROUP_INVALID" and "retry topic" in r.json()["detail"], r.text
    assert c.get(f"/v1/groups/{group}/push").status_code == 404  # no subscription was stored
    assert [m["body"] for m in receive(c, "g" * 10, topic, max=1)] == ["kept"]  # a shorter group takes the message


def test_receive_ack_and_an_acked_message_is_never_delivered_again(c: httpx.Client, topic: str) -> None:
    create(c, topic)
    sent = [send(c, topic, f"m{i}", queue_id=i % 2) for i in range(4)]
    got = receive(c, "g1", topic, max=10, invisible_ms=1000)
    assert sorted(m["body"] for m in got) == ["m0", "m1", "m2", "m3"]
    assert {m["msg_id"] for m in got} == {s["msg_id"] for s in sent}
    assert all(m["reconsume_times"] == 0 and m["topic"] == topic and m["invisible_until_ms"] > 0 for m in got)
    assert ack(c, "g1", topic, [m["receipt_handle"] for m in got]) == ["OK"] * 4
    assert receive(c, "g1", topic, wait_ms=2500, invisible_ms=1000) == []  # past invisible time + margin: nothing comes back
    other = receive(c, "g2", topic, max=10)  # another group has its own progress
    assert sorted(m["body"] for m in other) == ["m0", "m1", "m2", "m3"]


def test_an_unacked_message_is_redelivered_with_reconsume_times_plus_one(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=1)
    sent = send(c, topic, "again")
    (first,) = receive(c, "g1", topic, invisible_ms=1000)
    (second,) = receive_until(c, "g1", topic, 1, invisible_ms=1000)
    assert second["body"] == "again" and second["reconsume_times"] == 1 and second["msg_id"] == sent["msg_id"]
    assert second["topic"] == topic and second["receipt_handle"] != first["receipt_handle"]
    assert ack(c, "g1", topic, [first["receipt_handle"]]) == ["HANDLE_EXPIRED"]
    assert ack(c, "g1", topic, [second["receipt_handle"]]) == ["OK"]


def test_dead_letter_after_exactly_max_reconsume_times(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=1)
    r = c.put("/v1/groups/dlq-g", json={"max_reconsume_times": 2})
    assert r.status_code in (200, 201) and r.json()["max_reconsume_times"] == 2
    send(c, topic, "poison")
    times = [receive_until(c, "dlq-g", topic, 1, invisible_ms=1000)[0]["reconsume_times"] for _ in range(3)]
    assert times == [0, 1, 2]
    deadline = time.monotonic() + 20
    while True:  # the dead-letter topic is made on first use, with one queue
        r = c.get("/v1/topics/%DLQ%dlq-g/queues/0/messages", params={"offset": 0, "wait_ms": 1000})
        if r.status_code == 200 and r.json()["messages"]:
            break
        assert time.monotonic() < deadline, r.text
    (dead,) = r.json()["messages"]
    assert dead["body"] == "poison" and dead["reconsume_times"] == 3 and dead["properties"]["RETRY_TOPIC"] == topic
    assert receive(c, "dlq-g", topic, wait_ms=2500, invisible_ms=1000) == []
    via_receive = receive(c, "dlq-reader", "%DLQ%dlq-g")
    assert [m["body"] for m in via_receive] == ["poison"]
    group = c.get("/v1/groups/dlq-g").json()
    row = next(t for t in group["topics"] if t["topic"] == topic)
    assert row["dead_lettered"] == 1 and row["redelivered"] == 2 and row["received"] == 3


def test_dead_letters_are_sent_back_to_the_group_only(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=1)
    assert c.put("/v1/groups/redrive-g", json={"max_reconsume_times": 0}).status_code in (200, 201)
    sent = send(c, topic, "poison")
    assert [m["body"] for m in receive(c, "redrive-g", topic, invisible_ms=1000)] == ["poison"]
    # Not acked: dead-lettered once its invisible time passes (0 redeliveries).
    wait_for(lambda: c.get("/v1/groups/redrive-g").json()["dead_letters"] == 1, 20, what="the dead letter", poll_s=0.05)
    problem(c.post("/v1/groups/no-dlq-g/dead-letters/resend", json={"offsets": [0]}), 404, "TOPIC_NOT_FOUND")
    problem(c.post("/v1/groups/redrive-g/dead-letters/resend", json={"offsets": [0, 0]}), 400, "BODY_INVALID")
    r = c.post("/v1/groups/redrive-g/dead-letters/resend", json={"offsets": [0, 7]})
    assert r.status_code == 200, r.text
    assert r.json()["results"] == [
        {"offset": 0, "status": "RESENT", "topic": topic, "msg_id": sent["msg_id"]},
        {"offset": 7, "status": "NOT_FOUND", "topic": None, "msg_id": None},
    ]
    (again,) = receive_until(c, "redrive-g", topic, 1, invisible_ms=5000)
    assert again["body"] == "poison" and again["reconsume_times"] == 0 and again["msg_id"] == sent["msg_id"] and again["topic"] == topic
    assert ack(c, "redrive-g", topic, [again["receipt_handle"]]) == ["OK"]
    assert [m["body"] for m in receive(c, "fresh-g", topic, max=10)] == ["poison"]  # another group sees the topic's one message only


def test_a_group_shows_its_consumers_and_can_be_deleted(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=1)
    send(c, topic, "a")
    got = receive(c, "del-g", topic, invisible_ms=30_000)
    assert ack(c, "del-g", topic, [got[0]["receipt_handle"]]) == ["OK"]
    assert c.put("/v1/groups/del-g", json={"max_reconsume_times": 3}).status_code == 201
    info = c.get("/v1/groups/del-g").json()
    (consumer,) = info["consumers"]
    assert consumer["address"] == "127.0.0.1" and consumer["user_agent"].startswith("python-httpx/"), consumer
    assert consumer["requests"] == 2 and consumer["topics"] == [topic] and consumer["waiting"] is False
    assert c.delete("/v1/groups/del-g").status_code == 204
    problem(c.get("/v1/groups/del-g"), 404, "NOT_FOUND")
    problem(c.delete("/v1/groups/del-g"), 404, "NOT_FOUND")
    assert "del-g" not in {g["group"] for g in c.get("/v1/groups").json()["groups"]}
    assert c.get("/v1/groups/del-g/offsets", params={"topic": topic}).json()["queues"][0]["committed_offset"] == -1
    assert [m["body"] for m in receive(c, "del-g", topic)] == ["a"]  # consuming again starts at the first message


def test_invisible_time_extends_and_the_new_handle_acks(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=1)
    send(c, topic, "slow")
    (m,) = receive(c, "g1", topic, invisible_ms=1000)
    r = c.post(base("g1", topic) + "/invisible", json={"receipt_handle": m["receipt_handle"], "invisible_ms": 10_000})
    assert r.status_code == 200, r.text
    moved = r.json()
    assert moved["invisible_until_ms"] > m["invisible_until_ms"]
    assert receive(c, "g1", topic, wait_ms=2500, invisible_ms=1000) == []  # the old time passed; still invisible
    assert ack(c, "g1", topic, [moved["receipt_handle"]]) == ["OK"]
    expired = c.post(base("g1", topic) + "/invisible", json={"receipt_handle": m["receipt_handle"], "invisible_ms": 5_000})
    assert problem(expired, 409, "HANDLE_EXPIRED")


def test_a_repeated_or_superseded_ack_says_so_and_counts_nothing(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=1)
    send(c, topic, "once")
    send(c, topic, "moved")
    once, moved = receive(c, "dup-g", topic, max=2, invisible_ms=30_000)
    assert [ack(c, "dup-g", topic, [once["receipt_handle"]]) for _ in range(3)] == [["OK"], ["ALREADY_ACKED"], ["ALREADY_ACKED"]]
    r = c.post(base("dup-g", topic) + "/invisible", json={"receipt_handle": moved["receipt_handle"], "invisible_ms": 30_000})
    assert r.status_code == 200, r.text
    assert ack(c, "dup-g", topic, [moved["receipt_handle"]]) == ["HANDLE_SUPERSEDED"]
    again = c.post(base("dup-g", topic) + "/invisible", json={"receipt_handle": once["receipt_handle"], "invisible_ms": 5_000})
    problem(again, 409, "ALREADY_ACKED")
    row = next(t for t in c.get("/v1/groups/dup-g").json()["topics"] if t["topic"] == topic)
    assert (row["received"], row["acked"], row["in_flight"]) == (2, 1, 1)
    assert f'tidemq_group_acked_total{{group="dup-g",topic="{topic}"}} 1' in c.get("/metrics").text
    assert ack(c, "dup-g", topic, [r.json()["receipt_handle"]]) == ["OK"]


def test_forged_and_foreign_handles_are_invalid(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=1)
    send(c, topic, "x")
    (m,) = receive(c, "g1", topic)
    handle = m["receipt_handle"]
    payload, _, tag = handle.partition(".")
    forged = payload + "." + ("A" if tag[0] != "A" else "B") + tag[1:]
    assert ack(c, "g1", topic, [forged, "not-a-handle", "x" * 300]) == ["HANDLE_INVALID"] * 3
    assert ack(c, "g2", topic, [handle]) == ["HANDLE_INVALID"]  # another group's
    bad = c.post(base("g1", topic) + "/invisible", json={"receipt_handle": forged, "invisible_ms": 5_000})
    assert problem(bad, 400, "HANDLE_INVALID")
    assert ack(c, "g1", topic, [handle]) == ["OK"]


def test_fifo_group_keeps_order_across_two_consumers(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=2)
    assert c.put("/v1/groups/fifo-g", json={"fifo": True}).json()["fifo"] is True
    for i in range(4):
        r = c.post(f"/v1/topics/{topic}/messages", json={"body": f"step{i}", "sharding_key": "order-7"})
        assert r.status_code == 201
    seen: list[str] = []
    lock = threading.Lock()

    def consumer() -> None:
        with httpx.Client(base_url=str(c.base_url), timeout=30) as own:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with lock:
                    if len(seen) >= 4:
                        return
                got = receive(own, "fifo-g", topic, max=1, wait_ms=300, invisible_ms=5000)
                for m in got:
                    with lock:
                        seen.append(m["body"])
                    time.sleep(0.05)  # handling; the other consumer tries meanwhile and must get nothing of this queue
                    assert ack(own, "fifo-g", topic, [m["receipt_handle"]]) == ["OK"]

    threads = [threading.Thread(target=consumer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == ["step0", "step1", "step2", "step3"]


def test_a_held_receive_is_woken_by_a_produce(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=3)
    sender = threading.Timer(0.5, lambda: send(c, topic, "wake", queue_id=2))  # the test's timeline: sent while held
    sender.start()
    got = receive(c, "g1", topic, wait_ms=4000)
    sender.join()  # its send waits for the message to be readable: it must not outlive the test
    assert [m["body"] for m in got] == ["wake"]


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"invisible_ms": 999}, 400, "INVISIBLE_TIME_INVALID"),
        ({"invisible_ms": 43_200_001}, 400, "INVISIBLE_TIME_INVALID"),
        ({"max": 0}, 400, "MAX_INVALID"),
        ({"max": 33}, 400, "MAX_INVALID"),
        ({"wait_ms": 999_999}, 400, "WAIT_TOO_LONG"),
        ({"tag": "a||"}, 400, "TAG_INVALID"),
        ({"bogus": 1}, 400, "REQUEST_INVALID"),
    ],
)
def test_bad_receives_are_refused(c: httpx.Client, topic: str, params: dict[str, Any], status: int, code: str) -> None:
    create(c, topic, queues=1)
    assert problem(c.post(base("g1", topic) + "/receive", params=params), status, code)


def test_bad_names_and_bodies_are_refused(c: httpx.Client, topic: str) -> None:
    assert problem(c.post(base("g1", "nope-" + topic) + "/receive"), 404, "TOPIC_NOT_FOUND")
    create(c, topic, queues=1)
    assert problem(c.post(base("bad group", topic) + "/receive"), 400, "GROUP_INVALID")
    assert problem(c.post(base("g1", topic) + "/ack", json={"receipt_handles": []}), 400, "BODY_INVALID")
    assert problem(c.post(base("g1", topic) + "/ack", json={"receipt_handles": ["x"], "more": 1}), 400, "BODY_INVALID")
    assert problem(c.post(base("g1", topic) + "/ack", json={"receipt_handles": ["x"] * 1001}), 400, "BODY_INVALID")
    invisible = {"receipt_handle": "x", "invisible_ms": 500}
    assert problem(c.post(base("g1", topic) + "/invisible", json=invisible), 400, "BODY_INVALID")
    assert problem(c.put("/v1/groups/g1", json={"max_reconsume_times": -1}), 400, "BODY_INVALID")
    assert problem(c.put("/v1/groups/g1", json={"fifo": "yes"}), 400, "BODY_INVALID")
    assert problem(c.get("/v1/groups/never-seen-group"), 404, "NOT_FOUND")


def test_groups_are_listed_with_topics_lag_and_counts(c: httpx.Client, topic: str) -> None:
    create(c, topic, queues=2)
    for i in range(5):
        send(c, topic, f"m{i}", queue_id=i % 2)
    assert c.put("/v1/groups/list-g", json={"max_reconsume_times": 5}).status_code in (200, 201)
    assert c.put("/v1/groups/list-g", json={"max_reconsume_times": 4}).status_code == 200
    got = receive(c, "list-g", topic, max=3)
    assert ack(c, "list-g", topic, [got[0]["receipt_handle"]]) == ["OK"]
    info = c.get("/v1/groups/list-g").json()
    assert info["max_reconsume_times"] == 4 and info["configured"] is True and info["dead_letter_topic"] == "%DLQ%list-g"
    row = next(t for t in info["topics"] if t["topic"] == topic)
    assert row == {"topic": topic, "lag": 2, "received": 3, "acked": 1, "redelivered": 0, "dead_lettered": 0, "in_flight": 2}
    listed = {g["group"]: g for g in c.get("/v1/groups").json()["groups"]}
    assert listed["list-g"] == info
    metrics = c.get("/metrics").text
    assert f'tidemq_group_received_total{{group="list-g",topic="{topic}"}} 3' in metrics
    assert f'tidemq_group_in_flight{{group="list-g",topic="{topic}"}} 2' in metrics
    assert f'tidemq_group_lag{{group="list-g",topic="{topic}"}} 2' in metrics


def test_sigkill_during_receives_and_acks_loses_nothing_and_redelivers_no_acked_message(
    make_broker: MakeBroker,
    topic: str,
) -> None:
    broker = make_broker(POP_STORE + SMALL_BROKER, process=True)  # killed
    c = broker.client
    assert c is not None
    create(c, topic, queues=2)
    bodies = [f"m{i}" for i in range(20)]
    for i, body in enumerate(bodies):
        send(c, topic, body, queue_id=i % 2)
    taken = receive(c, "crash-g", topic, max=10, invisible_ms=2000)
    assert len(taken) == 10
    acked = taken[:5]
    assert ack(c, "crash-g", topic, [m["receipt_handle"] for m in acked]) == ["OK"] * 5
    broker.stop(signal.SIGKILL)  # at once after the last answer

    broker.start()
    c = broker.client
    assert c is not None
    remaining = set(bodies) - {m["body"] for m in acked}
    delivered: dict[str, int] = {}
    deadline = time.monotonic() + 40
    while set(delivered) != remaining:
        assert time.monotonic() < deadline, f"missing {sorted(remaining - set(delivered))}"
        for m in receive(c, "crash-g", topic, max=32, wait_ms=1000, invisible_ms=30_000):
            assert m["body"] in remaining, f"{m['body']} was acked before the crash and came again"
            delivered[m["body"]] = m["reconsume_times"]
            assert ack(c, "crash-g", topic, [m["receipt_handle"]]) == ["OK"]
    unacked_before = {m["body"] for m in taken[5:]}
    assert all(delivered[b] == 1 for b in unacked_before)  # redelivered after their invisible time
    assert all(delivered[b] == 0 for b in remaining - unacked_before)  # never received before the crash
    assert receive(c, "crash-g", topic, wait_ms=3500, invisible_ms=1000) == []
