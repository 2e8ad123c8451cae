"""Pulling: statuses, long-poll wake-up and timeout, disconnects, tag filters, the batch format."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import pytest

from store import decode_message
from store.layouts import iter_messages
from tests.app.conftest import BrokerProcess
from tests.app.helpers import problem, send
from tests.app.in_process import InProcessBroker
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def create(client: httpx.Client, topic: str, queues: int = 1) -> None:
    assert client.put(f"/v1/topics/{topic}", json={"queues": queues}).status_code in (200, 201)


def pull(client: httpx.Client, topic: str, queue_id: int = 0, **params: Any) -> dict[str, Any]:
    r = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params=params)
    assert r.status_code == 200, r.text
    got: dict[str, Any] = r.json()
    return got


def send_later(url: str, topic: str, delay_s: float, body: str = "late", **fields: Any) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)  # the test's timeline: the message is sent this long after the call
        httpx.post(f"{url}/v1/topics/{topic}/messages", json={"body": body, "queue_id": 0, **fields}, timeout=10)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_statuses(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    assert pull(client, topic, offset=0)["status"] == "NO_NEW_MSG"
    for i in range(5):
        send(client, topic, f"m{i}")
    got = pull(client, topic, offset=0, max=3)
    assert got["status"] == "FOUND" and [m["body"] for m in got["messages"]] == ["m0", "m1", "m2"]
    assert got["next_offset"] == 3 and got["min_offset"] == 0 and got["max_offset"] == 5
    rest = pull(client, topic, offset=3)
    assert [m["queue_offset"] for m in rest["messages"]] == [3, 4] and rest["next_offset"] == 5
    assert pull(client, topic, offset=5)["status"] == "NO_NEW_MSG"
    far = pull(client, topic, offset=50)
    # RocketMQ 4.9.4+ (DefaultMessageStore.getMessage): continue from the max offset, not from 0.
    assert far["status"] == "OFFSET_OVERFLOW_BADLY" and far["next_offset"] == 5 and far["messages"] == []


def test_held_pull_returns_as_soon_as_a_message_is_sent(
    shared_broker: BrokerProcess | InProcessBroker, client: httpx.Client, topic: str
) -> None:
    create(client, topic)
    sender = send_later(shared_broker.url, topic, 0.3, "wake-up")
    started = time.monotonic()
    got = pull(client, topic, offset=0, wait_ms=5000)
    elapsed = time.monotonic() - started
    sender.join()
    assert got["status"] == "FOUND" and got["messages"][0]["body"] == "wake-up"
    assert 0.25 <= elapsed < 4.0, elapsed


def test_held_pull_times_out_with_no_new_msg(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    started = time.monotonic()
    got = pull(client, topic, offset=0, wait_ms=400)
    elapsed = time.monotonic() - started
    assert got["status"] == "NO_NEW_MSG" and got["messages"] == [] and got["next_offset"] == 0
    assert elapsed >= 0.39, elapsed


def test_message_in_another_queue_does_not_wake_a_pull(
    shared_broker: BrokerProcess | InProcessBroker, client: httpx.Client, topic: str
) -> None:
    create(client, topic, queues=2)
    before = held_pulls(client)
    r = threading.Thread(
        target=lambda: (wait_for(lambda: held_pulls(client) > before, 5.0, "the pull held"), send(client, topic, "other", queue_id=1))
    )
    r.start()
    got = pull(client, topic, 0, offset=0, wait_ms=700)
    r.join()
    assert got["status"] == "NO_NEW_MSG"


def test_tag_filter(shared_broker: BrokerProcess | InProcessBroker, client: httpx.Client, topic: str) -> None:
    create(client, topic)
    for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA", None]):
        tags: dict[str, Any] = {"tags": tag} if tag else {}
        send(client, topic, f"m{i}", **tags)
    got = pull(client, topic, offset=0, tag="TagA||TagC")
    assert [m["body"] for m in got["messages"]] == ["m0", "m2", "m3"]
    assert pull(client, topic, offset=0, tag="*")["messages"][4]["body"] == "m4"
    nothing = pull(client, topic, offset=0, tag="TagZ")
    assert nothing["status"] == "NO_MATCHED_MSG" and nothing["messages"] == [] and nothing["next_offset"] == 5


def test_held_pull_with_a_tag_is_woken_only_by_a_matching_message(
    shared_broker: BrokerProcess | InProcessBroker, client: httpx.Client, topic: str
) -> None:
    create(client, topic)
    send(client, topic, "old", tags="TagB")

    def run() -> None:
        # The test's timeline, not a wait for the broker: "hit" comes 0.5 s in, which the pull's
        # elapsed time below must show (it was not answered on "skip").
        time.sleep(0.2)
        send(client, topic, "skip", tags="TagB")
        time.sleep(0.3)
        send(client, topic, "hit", tags="TagA")

    sender = threading.Thread(target=run)
    started = time.monotonic()  # before the sender starts: "hit" is sent at least 0.5 s after it
    sender.start()
    got = pull(client, topic, offset=0, tag="TagA", wait_ms=4000)
    elapsed = time.monotonic() - started
    sender.join()
    assert got["status"] == "FOUND" and [m["body"] for m in got["messages"]] == ["hit"]
    assert got["messages"][0]["queue_offset"] == 2
    assert 0.45 <= elapsed < 3.5, elapsed


def test_a_held_pull_with_a_tag_goes_through_a_backlog_of_other_tags(
    shared_broker: BrokerProcess | InProcessBroker, client: httpx.Client, topic: str
) -> None:
    """A held pull whose read matched nothing reads on from next_offset (in the read pool, far behind
    the tail) until the match, over more entries than one read examines and the inline window holds."""
    create(client, topic)
    for _ in range(3):
        batch = {"messages": [{"body": "other", "tags": "TagB", "queue_id": 0} for _ in range(1_000)]}
        assert client.post(f"/v1/topics/{topic}/messages", json=batch).status_code == 201
    send(client, topic, "hit", tags="TagA")
    # One read stops at the end of its consume-queue file (1,000 entries in this store).
    assert pull(client, topic, offset=0, tag="TagA")["status"] == "NO_MATCHED_MSG"
    got = pull(client, topic, offset=0, tag="TagA", wait_ms=4000)
    assert got["status"] == "FOUND" and [(m["body"], m["queue_offset"]) for m in got["messages"]] == [("hit", 3_000)]
    assert got["next_offset"] == 3_001


def test_held_pull_with_a_tag_times_out_with_no_matched_msg(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    send(client, topic, "a", tags="TagB")
    got = pull(client, topic, offset=0, tag="TagA", wait_ms=300)
    assert got["status"] == "NO_MATCHED_MSG" and got["next_offset"] == 1


def held_pulls(client: httpx.Client) -> int:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("tidemq_held_pulls "):
            return int(line.split()[1])
    raise AssertionError("tidemq_held_pulls missing")


def test_disconnected_long_poll_is_released_at_once(
    shared_broker: BrokerProcess | InProcessBroker, client: httpx.Client, topic: str
) -> None:
    create(client, topic)
    before = held_pulls(client)
    sock = socket.create_connection(("127.0.0.1", shared_broker.port), timeout=10)
    sock.sendall(f"GET /v1/topics/{topic}/queues/0/messages?offset=0&wait_ms=5000 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    wait_for(lambda: held_pulls(client) == before + 1, 3, what="the pull to be held")
    sock.close()
    wait_for(lambda: held_pulls(client) == before, 1.5, what="the disconnected pull to be released")


def test_batch_format_returns_stored_bytes(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    sent = [send(client, topic, f"body-{i}", tags="T", keys=[f"k{i}"]) for i in range(4)]
    r = client.get(
        f"/v1/topics/{topic}/queues/0/messages", params={"offset": 1, "max": 10}, headers={"accept": "application/x-tidemq-batch"}
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-tidemq-batch"
    assert r.headers["x-tidemq-status"] == "FOUND" and r.headers["x-tidemq-count"] == "3"
    assert r.headers["x-tidemq-next-offset"] == "4" and r.headers["x-tidemq-max-offset"] == "4" and r.headers["x-tidemq-min-offset"] == "0"
    data = r.content
    decoded = [decode_message(data, pos) for pos, _ in iter_messages(data)]
    assert [m["body"] for m in decoded] == [b"body-1", b"body-2", b"body-3"]
    assert [m["commitlog_offset"] for m in decoded] == [s["commitlog_offset"] for s in sent[1:]]
    empty = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 4}, headers={"accept": "application/x-tidemq-batch"})
    assert empty.content == b"" and empty.headers["x-tidemq-status"] == "NO_NEW_MSG"


def test_group_offset_is_the_default_start(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    for i in range(3):
        send(client, topic, f"m{i}")
    assert pull(client, topic, group="g1")["messages"][0]["queue_offset"] == 0
    assert client.put("/v1/groups/g1/offsets", json={"topic": topic, "queue_id": 0, "offset": 2}).status_code == 200
    assert [m["body"] for m in pull(client, topic, group="g1")["messages"]] == ["m2"]
    no_position = client.get(f"/v1/topics/{topic}/queues/0/messages").json()["messages"]  # neither: from the first kept message
    assert [m["body"] for m in no_position] == ["m0", "m1", "m2"]


def test_pull_parameter_errors(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=2)
    url = f"/v1/topics/{topic}/queues/0/messages"
    problem(client.get(url, params={"offset": -1}), 400, "OFFSET_INVALID")
    problem(client.get(url, params={"offset": "x"}), 400, "OFFSET_INVALID")
    assert client.get(url).json()["status"] == "NO_NEW_MSG"  # no offset, no group: from the queue's first kept message
    problem(client.get(url, params={"offset": 0, "wait_ms": 5001}), 400, "WAIT_TOO_LONG")
    problem(client.get(url, params={"offset": 0, "wait_ms": -1}), 400, "REQUEST_INVALID")
    problem(client.get(url, params={"offset": 0, "max": 0}), 400, "MAX_INVALID")
    problem(client.get(url, params={"offset": 0, "max": 257}), 400, "MAX_INVALID")
    problem(client.get(url, params={"offset": 0, "tag": "A||"}), 400, "TAG_INVALID")
    problem(client.get(url, params={"group": "bad group"}), 400, "GROUP_INVALID")
    problem(client.get(f"/v1/topics/{topic}/queues/2/messages", params={"offset": 0}), 404, "QUEUE_NOT_FOUND")
    problem(client.get(f"/v1/topics/{topic}/queues/-1/messages", params={"offset": 0}), 404, "QUEUE_NOT_FOUND")
    problem(client.get(f"/v1/topics/{topic}/queues/x/messages", params={"offset": 0}), 400, "REQUEST_INVALID")
    problem(client.get("/v1/topics/nope-nope/queues/0/messages", params={"offset": 0}), 404, "TOPIC_NOT_FOUND")
    problem(client.get("/v1/topics/a.b/queues/0/messages", params={"offset": 0}), 400, "TOPIC_INVALID")
    assert client.put(f"/v1/topics/{topic}-w", json={"queues": 1, "perm": "w"}).status_code == 201
    problem(client.get(f"/v1/topics/{topic}-w/queues/0/messages", params={"offset": 0}), 403, "TOPIC_NOT_READABLE")


def test_a_held_pull_past_the_end_of_an_empty_queue_is_not_served_from_below_its_offset(
    shared_broker: BrokerProcess | InProcessBroker, client: httpx.Client, topic: str
) -> None:
    """Offset 1 of an empty queue is past its end: answered at once as moved, never held and then
    answered with message 0 (a consumer would see a message below the offset it asked for)."""
    create(client, topic)
    sender = send_later(shared_broker.url, topic, 0.3, body="zero")
    started = time.monotonic()
    reply = pull(client, topic, offset=1, wait_ms=3000)
    sender.join()
    assert reply["status"] == "OFFSET_OVERFLOW_BADLY" and reply["messages"] == [] and reply["next_offset"] == 0
    assert time.monotonic() - started < 2.5, "answered at once, not held"
    held = pull(client, topic, offset=1, wait_ms=300)  # now the queue ends at 1: a held pull of offset 1 waits
    assert held["status"] == "NO_NEW_MSG" and held["next_offset"] == 1
