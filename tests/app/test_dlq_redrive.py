"""Dead-letter redrive over HTTP and from the command line, black-box: messages dead-lettered by
group consumption's own redelivery come back to the group's receives with reconsume times 0, the
progress is reported, a FIFO group and bad bodies are refused. (The exactly-once move across a
SIGKILL is tests/store/test_dlq_redrive.py's.)"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker, running_broker
from tests.app.helpers import problem, send
from tests.app.in_process import InProcessBroker
from tests.client.cli_helpers import tidemq
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)
POP_STORE = SMALL_STORE + "pop_ack_margin_ms = 100\npop_revive_interval_ms = 20\n"


@pytest.fixture(scope="module")
def redrive_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | InProcessBroker]:
    yield from running_broker(tmp_path_factory, "redrive", POP_STORE + SMALL_BROKER)


@pytest.fixture
def c(redrive_broker: BrokerProcess | InProcessBroker) -> httpx.Client:
    assert redrive_broker.client is not None
    return redrive_broker.client


def receive(c: httpx.Client, group: str, topic: str, **params: int) -> list[dict[str, Any]]:
    r = c.post(f"/v1/groups/{group}/topics/{topic}/receive", params=params)
    assert r.status_code == 200, r.text
    messages: list[dict[str, Any]] = r.json()["messages"]
    return messages


def dead_letter(c: httpx.Client, group: str, topic: str, bodies: list[str]) -> None:
    """Send `bodies`, receive them for `group` (max_reconsume_times 0) and let the invisible time pass: they go to its DLQ."""
    assert c.put(f"/v1/groups/{group}", json={"max_reconsume_times": 0}).status_code in (200, 201)
    for body in bodies:
        send(c, topic, body)
    taken: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while len(taken) < len(bodies):
        assert time.monotonic() < deadline
        taken += receive(c, group, topic, max=32, invisible_ms=1000, wait_ms=500)
    last: list[httpx.Response] = []

    def dead_lettered() -> bool:
        last[:] = [c.get(f"/v1/topics/%DLQ%{group}/queues/0/messages", params={"offset": 0})]
        return last[0].status_code == 200 and len(last[0].json()["messages"]) >= len(bodies)

    wait_for(dead_lettered, 20, what=lambda: f"{len(bodies)} dead letters: {last[0].text}", poll_s=0.05)


def redrive_when(c: httpx.Client, group: str, done: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """The group's redrive status once `done` holds for it (20 s at most)."""
    last: list[dict[str, Any]] = []

    def status() -> dict[str, Any] | None:
        last[:] = [c.get(f"/v1/groups/{group}/dlq/redrive").json()]
        return last[0] if done(last[0]) else None

    info = wait_for(status, 20, what=lambda: f"{what}: {last}", poll_s=0.02)
    assert info is not None  # wait_for answers a truthy value
    return info


def wait_done(c: httpx.Client, group: str) -> dict[str, Any]:
    return redrive_when(c, group, lambda info: info["state"] == "done", "the redrive to finish")


def test_dead_letters_moved_back_are_received_again_with_the_progress_reported(c: httpx.Client, topic: str) -> None:
    group = "rd-" + topic
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    problem(c.get(f"/v1/groups/{group}/dlq/redrive"), 404, "NOT_FOUND")
    dead_letter(c, group, topic, ["a", "b", "c"])
    assert receive(c, group, topic, max=32) == []  # nothing left to receive: all three are dead letters

    r = c.post(f"/v1/groups/{group}/dlq/redrive", json={"max_messages": 2})
    assert r.status_code == 202, r.text
    assert (r.json()["start_offset"], r.json()["end_offset"], r.json()["total"]) == (0, 2, 2)
    info = wait_done(c, group)
    assert (info["moved"], info["skipped"], info["remaining"], info["position"], info["dead_letters_after"]) == (2, 0, 0, 2, 1)
    assert info["finished_ms"] >= info["started_ms"] > 0 and info["dead_letter_topic"] == f"%DLQ%{group}"
    got = receive(c, group, topic, max=32, wait_ms=2000)
    assert sorted(m["body"] for m in got) == ["a", "b"] and all(m["reconsume_times"] == 0 and m["topic"] == topic for m in got)
    acked = c.post(f"/v1/groups/{group}/topics/{topic}/ack", json={"receipt_handles": [m["receipt_handle"] for m in got]})
    assert [x["status"] for x in acked.json()["results"]] == ["OK", "OK"]

    # The rest, with no body: from where the last redrive ended.
    r = c.post(f"/v1/groups/{group}/dlq/redrive")
    assert r.status_code == 202 and (r.json()["start_offset"], r.json()["end_offset"]) == (2, 3), r.text
    assert wait_done(c, group)["moved"] == 1
    assert [m["body"] for m in receive(c, group, topic, max=32, wait_ms=2000)] == ["c"]
    # Nothing new: a redrive of nothing is done at once.
    r = c.post(f"/v1/groups/{group}/dlq/redrive", json={})
    assert r.status_code == 202 and r.json()["state"] == "done" and r.json()["total"] == 0


def test_refusals(c: httpx.Client, topic: str) -> None:
    assert c.put("/v1/groups/fifo-rd", json={"fifo": True}).status_code in (200, 201)
    problem(c.post("/v1/groups/fifo-rd/dlq/redrive"), 409, "REDRIVE_NOT_SUPPORTED")
    problem(c.post("/v1/groups/fifo-rd/dead-letters/resend", json={"offsets": [0]}), 409, "REDRIVE_NOT_SUPPORTED")
    for body in ({"max_messages": 0}, {"max_messages": "5"}, {"max": 5}, [1]):
        problem(c.post("/v1/groups/g/dlq/redrive", json=body), 400, "BODY_INVALID")
    problem(c.post("/v1/groups/bad.group/dlq/redrive"), 400, "GROUP_INVALID")


def test_the_command_line_redrives_and_waits(
    redrive_broker: BrokerProcess | InProcessBroker,
    c: httpx.Client,
    topic: str,
) -> None:
    group = "cli-" + topic
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    dead_letter(c, group, topic, ["x", "y"])
    done = tidemq(redrive_broker.url, "dlq", "redrive", group, "--wait", "--format", "json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert (info["state"], info["moved"], info["total"]) == ("done", 2, 2)
    shown = tidemq(redrive_broker.url, "dlq", "redrive", group, "--status")
    assert shown.returncode == 0 and shown.lines()[0].split()[:3] == ["GROUP", "STATE", "MOVED"]
    assert shown.lines()[1].split()[:3] == [group, "done", "2"]
    assert sorted(m["body"] for m in receive(c, group, topic, max=32, wait_ms=2000)) == ["x", "y"]
    refused = tidemq(redrive_broker.url, "dlq", "redrive", "fifo-cli", "--max-messages", "0")
    assert refused.returncode == 2 and "--max-messages" in refused.stderr


def test_a_second_redrive_while_one_runs_is_409_with_the_running_one(make_broker: MakeBroker) -> None:
    # Passes a minute apart: the first pass moves 16 batches of 32, then the redrive runs until the next.
    broker = make_broker(SMALL_STORE + "pop_revive_interval_ms = 60000\n" + SMALL_BROKER)
    c = broker.client
    assert c is not None
    assert c.put("/v1/topics/T", json={"queues": 1}).status_code == 201
    # Dead letters as the revive service writes them: in %DLQ%{group}, naming their topic in RETRY_TOPIC.
    batch = [{"body": f"d{i}", "properties": {"RETRY_TOPIC": "T"}} for i in range(600)]
    assert c.put("/v1/topics/%DLQ%slow", json={"queues": 1}).status_code == 201
    r = c.post("/v1/topics/%DLQ%slow/messages", json={"messages": batch})
    assert r.status_code == 201, r.text
    first = c.post("/v1/groups/slow/dlq/redrive")
    assert first.status_code == 202 and first.json()["total"] == 600, first.text
    info = redrive_when(c, "slow", lambda info: info["moved"] >= 512, "the first pass's 512 messages")
    assert (info["state"], info["moved"], info["remaining"]) == ("running", 512, 88)
    second = problem(c.post("/v1/groups/slow/dlq/redrive", json={"max_messages": 5}), 409, "REDRIVE_RUNNING")
    assert second["redrive"]["start_offset"] == 0 and second["redrive"]["end_offset"] == 600
