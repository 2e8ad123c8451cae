"""What tidemq leaves in a RocketMQ store's config/ after serving it, and the store lock both honour.

RocketMQ reads config/*.json with fastjson, which takes both quoted and bare integer keys; the
files tidemq writes back must keep RocketMQ's shapes (TopicConfigManager's topicConfigTable,
ConsumerOffsetManager's and ScheduleMessageService's offsetTable). RocketMQ's
DefaultMessageStore#start locks byte 0 of `lock` with FileChannel#tryLock (fcntl on Linux).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.app.conftest import BrokerProcess
from tests.interop import scenario
from tests.interop.conftest import CONFIG, serve, wait_ready
from tests.waiting import wait_for

_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def fastjson_loads(text: str) -> Any:
    """Read JSON as fastjson does for these files: integer map keys may be bare (`{0:5}`) or quoted."""
    return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))


def test_fastjson_reader_takes_both_key_forms(tmp_path: Path) -> None:
    assert fastjson_loads('{"offsetTable":{"t@g":{0:5,1:7\n}}}') == fastjson_loads('{"offsetTable":{"t@g":{"0":5,"1":7}}}')
    scenario.build(str(tmp_path))
    original = fastjson_loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert original["offsetTable"]["orders@billing"] == {"0": 2, "1": 4, "2": 0, "3": 0}


def test_metadata_written_back_keeps_rocketmqs_shapes(tmp_path: Path) -> None:
    served = serve(tmp_path)
    try:
        client = served.client
        r = client.put("/v1/groups/billing/offsets", json={"topic": "orders", "queue_id": 0, "offset": 4})
        assert r.status_code == 200, r.text
        r = client.put("/v1/topics/invoices", json={"queues": 2})
        assert r.status_code == 201, r.text
        _wait_delivered(client)  # level 1's overdue message: delayOffset.json then moves level 1 to 1
        assert served.broker.stop() == 0
    finally:
        served.broker.kill()
    config = served.root / "config"
    topics = fastjson_loads((config / "topics.json").read_text())["topicConfigTable"]
    for name, queues in (("orders", 4), ("audit", 2), ("delayed", 1), ("invoices", 2)):
        t = topics[name]
        assert (t["topicName"], t["perm"], t["readQueueNums"], t["writeQueueNums"]) == (name, 6, queues, queues), t
    offsets_text = (config / "consumerOffset.json").read_text()
    offsets = json.loads(offsets_text)["offsetTable"]  # quoted keys: plain JSON, which fastjson reads too
    assert offsets["orders@billing"] == {"0": 4, "1": 4, "2": 0, "3": 0}
    assert offsets["audit@reporting"] == {"0": 10, "1": 10}
    delay = fastjson_loads((config / "delayOffset.json").read_text())["offsetTable"]
    assert {k: delay[k] for k in ("1", "2", "18")} == {"1": 1, "2": 1, "18": 0}
    # And tidemq reads back what it wrote.
    again = BrokerProcess(served.root, CONFIG)
    try:
        again.start()
        assert again.client is not None
        wait_ready(again.client)
        r = again.client.get("/v1/groups/billing/offsets", params={"topic": "orders"})
        assert [q["committed_offset"] for q in r.json()["queues"]] == [4, 4, 0, 0]
        assert again.client.get("/v1/topics/invoices").json()["read_queues"] == 2
    finally:
        again.kill()


def _wait_delivered(client: Any, timeout_s: float = 20.0) -> None:
    wait_for(
        lambda: client.get("/v1/topics/delayed").json()["queues"][0]["max_offset"] >= 2,
        timeout_s,
        what="the overdue level-1 message to be delivered",
        poll_s=0.05,
    )


def test_a_store_rocketmq_holds_is_refused(tmp_path: Path) -> None:
    """A running RocketMQ broker holds a POSIX lock on byte 0 of `lock`: tidemq must not open the store."""
    root = tmp_path / "store"
    scenario.build(str(root))
    fd = os.open(root / "lock", os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # FileChannel#tryLock(0, 1, false)
        broker = BrokerProcess(root, CONFIG)
        with pytest.raises(RuntimeError, match="exited"):
            broker.start()
        assert "is used by another process" in broker.log()
    finally:
        os.close(fd)


def test_a_store_tidemq_serves_cannot_be_locked_by_rocketmq(tmp_path: Path) -> None:
    served = serve(tmp_path)
    try:
        fd = os.open(served.root / "lock", os.O_RDWR)
        try:
            with pytest.raises(OSError):
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        finally:
            os.close(fd)
    finally:
        served.broker.kill()
