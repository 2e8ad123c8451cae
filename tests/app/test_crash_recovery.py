"""Whole-process crash behaviour: what a broker answered before SIGKILL is there after a restart."""

from __future__ import annotations

import json
import signal

import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, MakeBroker
from tests.app.helpers import send


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_committed_offsets_survive_sigkill(make_broker: MakeBroker, topic: str, flush: str) -> None:
    config = SMALL_STORE + f'flush_disk_type = "{flush}"\n' + SMALL_BROKER
    broker = make_broker(config, process=True)  # killed
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 3}).status_code == 201
    for i in range(9):
        send(c, topic, f"m{i}", queue_id=i % 3)
    expected = {0: -1, 1: -1, 2: -1}
    for round_ in range(3):
        for q in range(3):
            offset = min(3, round_ + q)
            assert c.put("/v1/groups/g1/offsets", json={"topic": topic, "queue_id": q, "offset": offset}).status_code == 200
            expected[q] = offset
    batch = [{"topic": topic, "queue_id": 0, "offset": 1}, {"topic": topic, "queue_id": 2, "offset": 2}]
    assert c.put("/v1/groups/g2/offsets", json=batch).status_code == 200
    broker.stop(signal.SIGKILL)  # at once after the last 200: no periodic compaction has run

    broker.start()
    assert broker.client is not None
    got = {
        q["queue_id"]: q["committed_offset"] for q in broker.client.get("/v1/groups/g1/offsets", params={"topic": topic}).json()["queues"]
    }
    assert got == expected
    got2 = {
        q["queue_id"]: q["committed_offset"] for q in broker.client.get("/v1/groups/g2/offsets", params={"topic": topic}).json()["queues"]
    }
    assert got2 == {0: 1, 1: -1, 2: 2}


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_topics_rebuilt_from_the_log_when_topics_json_is_lost(make_broker: MakeBroker, topic: str, damage: str) -> None:
    broker = make_broker(process=True)  # its exit status and log
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 4}).status_code == 201
    sent = [send(c, topic, f"body-{i}", queue_id=i % 3) for i in range(6)]  # queue 3 stays empty: no directory
    assert broker.stop() == 0
    config_dir = broker.store_dir / "config"
    for name in ("topics.json", "topics.json.bak"):
        path = config_dir / name
        if damage == "deleted":
            path.unlink(missing_ok=True)
        elif path.exists():
            path.write_text('{"topicConfigTable": {"x": ')

    broker.start()
    c = broker.client
    assert c is not None
    listed = {t["topic"]: t for t in c.get("/v1/topics").json()["topics"]}
    # The topic table's state records hold the exact queue count (the queues on disk would say 3).
    assert topic in listed and listed[topic]["read_queues"] == 4
    for m in sent:
        r = c.get(f"/v1/topics/{topic}/queues/{m['queue_id']}/messages", params={"offset": m["queue_offset"], "max": 1})
        assert r.status_code == 200, r.text
        assert [x["body"] for x in r.json()["messages"]] == [f"body-{sent.index(m)}"]
    assert "rebuilt" in broker.log() and "WARNING" in broker.log()
    saved = json.loads((config_dir / "topics.json").read_text())
    assert topic in saved["topicConfigTable"]


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_produces_answered_before_sigkill_are_there_after_it_as_answered(make_broker: MakeBroker, topic: str, flush: str) -> None:
    """Single and batched JSON produces (the put lane's, store/_native/put_lane_binding.h, and the general path's at a
    file roll) across several commitlog files: every message answered 201 is there after a SIGKILL, at the queue offset
    and with the ids and body its reply gave."""
    broker = make_broker(SMALL_STORE + f'flush_disk_type = "{flush}"\n' + SMALL_BROKER, process=True)  # killed
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 2}).status_code == 201
    sent: dict[tuple[int, int], tuple[str, str, str]] = {}
    for i in range(240):
        queue_id = i % 2
        bodies = [f"{i}.{j}:" + "x" * (700 + 37 * ((i + j) % 50)) for j in range(1 if i % 6 else 3)]
        doc: dict[str, object] = (
            {"body": bodies[0], "queue_id": queue_id}
            if len(bodies) == 1
            else {"messages": [{"body": b, "queue_id": queue_id} for b in bodies]}
        )
        r = c.post(f"/v1/topics/{topic}/messages", json=doc)
        assert r.status_code == 201, r.text
        reply = r.json()
        for body, answer in zip(bodies, reply["results"] if len(bodies) > 1 else [reply], strict=True):
            assert answer["queue_id"] == queue_id
            sent[(queue_id, answer["queue_offset"])] = (body, answer["msg_id"], answer["offset_msg_id"])
    assert c.get("/v1/store").json()["runtime"]["commitlog_max_offset"] > 2 * 262144  # three files at least
    broker.stop(signal.SIGKILL)

    broker.start()
    assert broker.client is not None
    got: dict[tuple[int, int], tuple[str, str, str]] = {}
    for queue_id in range(2):
        offset = 0
        while True:
            r = broker.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": offset, "max": 64})
            assert r.status_code == 200, r.text
            messages = r.json()["messages"]
            if not messages:
                break
            for m in messages:
                got[(queue_id, m["queue_offset"])] = (m["body"], m["msg_id"], m["offset_msg_id"])
            offset = messages[-1]["queue_offset"] + 1
    assert got == sent
