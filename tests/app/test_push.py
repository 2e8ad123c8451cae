"""Push subscriptions over HTTP, black-box: a receiver the test runs on loopback gets every message at
least once with a valid signature, failed deliveries come back after RocketMQ's backoff (one second
a level here) and end in the dead-letter topic, refused targets store nothing, and a SIGKILLed
broker keeps its subscription and delivers again after the restart."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from app.push_signature import SIGNATURE_HEADER, verify
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, running_broker
from tests.app.helpers import commitlog_max, problem, send
from tests.app.in_process import InProcessBroker
from tests.app.push_receiver import Delivery, PushReceiver
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)
SECRET = "a-secret-of-32-characters-length"
# Redelivery a second after a failure: every backoff level is 1 s, the revive margin short.
PUSH_STORE = SMALL_STORE + 'pop_ack_margin_ms = 100\npop_revive_interval_ms = 20\nmessage_delay_level = "1s 1s 1s 1s 1s"\n'
PUSH_BROKER = SMALL_BROKER + 'push_allowed_hosts = ["127.0.0.1"]\npush_idle_poll_ms = 50\npush_max_in_flight = 8\n'


@pytest.fixture(scope="module")
def push_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | InProcessBroker]:
    yield from running_broker(tmp_path_factory, "push", PUSH_STORE + PUSH_BROKER)


@pytest.fixture
def c(push_broker: BrokerProcess | InProcessBroker) -> httpx.Client:
    assert push_broker.client is not None
    return push_broker.client


def subscribe(c: httpx.Client, group: str, topic: str, url: str, **fields: object) -> httpx.Response:
    return c.put(f"/v1/groups/{group}/push", json={"topic": topic, "url": url, "secret": SECRET, **fields})


def accepted(got: list[Delivery]) -> set[bytes]:
    return {d.body for d in got if 200 <= d.status < 300}


def dead_letters(c: httpx.Client, group: str, want: int) -> list[dict[str, Any]]:
    """The messages of the group's dead-letter topic once it holds `want` (it exists once the first arrives)."""

    def held() -> list[dict[str, Any]] | None:
        r = c.get(f"/v1/topics/%DLQ%{group}/queues/0/messages", params={"offset": 0})
        if r.status_code == 200 and len(r.json()["messages"]) >= want:
            messages: list[dict[str, Any]] = r.json()["messages"]
            return messages
        assert r.status_code in (200, 404), r.text
        return None

    letters = wait_for(held, 30, what=f"the dead-letter topic to hold {want} messages", poll_s=0.05)
    assert letters is not None  # wait_for answers a truthy value
    return letters


def test_every_message_arrives_signed_and_a_failing_receivers_messages_end_in_the_dlq(c: httpx.Client, topic: str) -> None:
    assert c.put(f"/v1/topics/{topic}", json={"queues": 2}).status_code == 201
    group = "push-" + topic
    assert c.put(f"/v1/groups/{group}", json={"max_reconsume_times": 1}).status_code == 201

    def answer(body: bytes, attempt: int) -> int:
        if body.startswith(b"poison"):
            return 503  # always: dead-lettered after max_reconsume_times
        if body.startswith(b"flaky") and attempt == 1:
            return 500  # once: delivered again after the backoff
        return 204

    with PushReceiver(answer) as receiver:
        r = subscribe(c, group, topic, receiver.url, max_in_flight=4, timeout_ms=2000)
        assert r.status_code == 201, r.text
        view = r.json()
        assert "secret" not in view and (view["group"], view["topic"], view["url"], view["max_in_flight"]) == (
            group,
            topic,
            receiver.url,
            4,
        )
        assert subscribe(c, group, topic, receiver.url, max_in_flight=4, timeout_ms=2000).status_code == 200  # the same again: updated
        bodies = [f"ok-{i}" for i in range(6)] + ["flaky-0", "flaky-1", "poison-0", "poison-1"]
        sent = {b: send(c, topic, b, queue_id=i % 2, tags="t1", keys=[f"k{i}", "clé"]) for i, b in enumerate(bodies)}
        good = {b.encode() for b in bodies if not b.startswith("poison")}
        got = receiver.wait_for(lambda got: good <= accepted(got))
        dead = dead_letters(c, group, 2)
        assert sorted(m["body"] for m in dead) == ["poison-0", "poison-1"]
        got = receiver.got()

    now_ms = int(time.time() * 1000)
    for d in got:  # every delivery is signed, and a receiver can check it
        assert verify(SECRET, d.body, d.headers[SIGNATURE_HEADER], now_ms), d.headers
        assert not verify("another-secret-of-32-characters!", d.body, d.headers[SIGNATURE_HEADER], now_ms)
        body = d.body.decode()
        assert unquote(d.headers["tidemq-message-id"]) == sent[body]["msg_id"]
        assert (d.headers["tidemq-topic"], d.headers["tidemq-tags"], d.headers["tidemq-subscription"]) == (topic, "t1", group)
        assert [unquote(k) for k in d.headers["tidemq-keys"].split(" ")] == [f"k{bodies.index(body)}", "clé"]
        assert d.headers["content-type"] == "application/octet-stream" and d.path == "/hook"
    attempts = {b: [int(d.headers["tidemq-reconsume-times"]) for d in got if d.body == b.encode()] for b in bodies}
    assert attempts["flaky-0"][:2] == [0, 1] and attempts["poison-1"][:2] == [0, 1]
    assert all(len(attempts[b]) >= 1 for b in bodies)  # at least once each

    info = c.get(f"/v1/groups/{group}/push").json()
    assert info["state"] == "delivering" and info["counts"]["delivered"] >= 8 and info["counts"]["failed"] >= 4
    metrics = c.get("/metrics").text
    assert f'tidemq_push_deliveries_total{{group="{group}",outcome="delivered"}}' in metrics
    assert c.delete(f"/v1/groups/{group}/push").status_code == 204
    problem(c.get(f"/v1/groups/{group}/push"), 404, "NOT_FOUND")
    assert group not in [s["group"] for s in c.get("/v1/push").json()["subscriptions"]]


def test_a_large_body_goes_to_the_dead_letter_topic_unposted(tmp_path: Path, topic: str) -> None:
    config = PUSH_STORE + PUSH_BROKER + "push_max_body_bytes = 10\npush_max_subscriptions = 1\n"
    broker = BrokerProcess(tmp_path / "store", config)
    with PushReceiver() as receiver:
        c = broker.start().client
        assert c is not None
        assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
        assert subscribe(c, "big", topic, receiver.url).status_code == 201
        problem(subscribe(c, "second", topic, receiver.url), 409, "PUSH_LIMIT_REACHED")
        assert subscribe(c, "big", topic, receiver.url, max_in_flight=2).status_code == 200  # replacing one is not a new one
        send(c, topic, "x" * 11)
        send(c, topic, "small")
        receiver.wait_for(lambda got: accepted(got) == {b"small"})
        wait_for(
            lambda: c.get("/v1/groups/big/push").json()["counts"]["too_large"] >= 1, 20, what="the large body to be counted", poll_s=0.05
        )
        dead = dead_letters(c, "big", 1)
        assert [m["body"] for m in dead] == ["x" * 11]
        assert all(d.body != b"x" * 11 for d in receiver.got())
    broker.kill()


def test_a_redirect_is_not_followed_and_a_slow_receiver_times_out(c: httpx.Client, topic: str) -> None:
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201

    def answer(body: bytes, attempt: int) -> int:
        if body == b"slow":
            time.sleep(1.5)  # past the subscription's timeout_ms
        return 307 if body == b"moved" else 200

    with PushReceiver(answer) as receiver:
        r = subscribe(c, "redirected-" + topic, topic, receiver.url + "?x=1", timeout_ms=300)
        assert r.status_code == 201, r.text
        send(c, topic, "moved")
        send(c, topic, "slow")

        def both_failed() -> dict[str, Any] | None:
            counts = c.get(f"/v1/groups/redirected-{topic}/push").json()["counts"]
            return counts if counts["failed"] >= 1 and counts["errors"] >= 1 else None

        counts = wait_for(both_failed, 30, what="a failed delivery and an error", poll_s=0.05)
        assert counts is not None  # wait_for answers a truthy value
        assert c.delete(f"/v1/groups/redirected-{topic}/push").status_code == 204
    assert counts["delivered"] == 0  # neither the redirect nor the reply that came too late is an ack
    assert all(d.path == "/hook?x=1" for d in receiver.got())  # the 307's Location (/elsewhere) was never asked for
    assert {d.body for d in receiver.got()} == {b"moved", b"slow"}


def test_a_target_not_allowed_is_refused_and_nothing_is_stored(quiet_client: httpx.Client, c: httpx.Client, topic: str) -> None:
    # The quiet broker lists no push host (the default): no target at all.
    assert quiet_client.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    before = commitlog_max(quiet_client)
    body = problem(subscribe(quiet_client, "g", topic, "http://127.0.0.1:9/hook"), 400, "PUSH_TARGET_FORBIDDEN")
    assert "push_allowed_hosts is empty" in body["detail"]
    assert commitlog_max(quiet_client) == before
    problem(quiet_client.get("/v1/groups/g/push"), 404, "NOT_FOUND")
    # A broker that lists 127.0.0.1 refuses every other host, and URLs of the wrong shape.
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    for url in ("http://localhost:9/hook", "http://127.0.0.2/", "https://example.com/hook", "http://127.0.0.1.example.com/"):
        problem(subscribe(c, "g", topic, url), 400, "PUSH_TARGET_FORBIDDEN")
    for url in ("ftp://127.0.0.1/", "http://user:pw@127.0.0.1/", "http://127.0.0.1/#frag", "/relative", "http://127.0.0.1:99999/"):
        problem(subscribe(c, "g", topic, url), 400, "PUSH_URL_INVALID")
    problem(subscribe(c, "g", topic, "http://127.0.0.1:9/", max_in_flight=9), 400, "BODY_INVALID")  # over push_max_in_flight
    problem(c.put("/v1/groups/g/push", json={"topic": topic, "url": "http://127.0.0.1:9/", "secret": "short"}), 400, "BODY_INVALID")
    problem(subscribe(c, "g", "no-such-topic", "http://127.0.0.1:9/"), 404, "TOPIC_NOT_FOUND")
    problem(c.get("/v1/groups/g/push"), 404, "NOT_FOUND")


def test_a_subscription_survives_a_sigkill_and_delivers_after_the_restart(tmp_path: Path, topic: str) -> None:
    with PushReceiver() as receiver:
        broker = BrokerProcess(tmp_path / "store", PUSH_STORE + PUSH_BROKER).start()
        try:
            c = broker.client
            assert c is not None
            assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
            assert subscribe(c, "durable", topic, receiver.url).status_code == 201
            send(c, topic, "before")
            receiver.wait_for(lambda got: accepted(got) == {b"before"})
            assert broker.proc is not None
            broker.proc.send_signal(signal.SIGKILL)
            broker.proc.wait(10)
            broker.start()
            c = broker.client
            assert c is not None
            info = c.get("/v1/groups/durable/push").json()
            assert (info["topic"], info["url"], info["state"]) == (topic, receiver.url, "delivering")
            send(c, topic, "after")
            receiver.wait_for(lambda got: accepted(got) == {b"before", b"after"})
        finally:
            broker.kill()
