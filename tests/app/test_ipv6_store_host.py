"""A store written by a broker with an IPv6 store host: its 56-character offset message ids are
looked up over HTTP, and its 20-byte hosts are served to pulls and to the client's decoder."""

from __future__ import annotations

from pathlib import Path

from tests.app.conftest import SMALL_BROKER, SMALL_STORE
from tests.app.helpers import problem
from tests.app.in_process import InProcessBroker
from tests.store.rocketmq_records import BORN_V6, STORE_V6, Record, write_commit_log
from tidemq import decode_stored


def test_offset_ids_of_both_store_host_forms_are_looked_up(tmp_path: Path) -> None:
    records = [Record("hosts", f"m{i}".encode(), {"TAGS": "t"}, 0, i, flag) for i, flag in enumerate([0, STORE_V6, BORN_V6 | STORE_V6])]
    broker = InProcessBroker(tmp_path / "store", SMALL_STORE + SMALL_BROKER)
    starts = write_commit_log(str(broker.store_dir / "commitlog"), 262_144, records)
    broker.start()
    try:
        client = broker.client
        assert client is not None
        ids = [(r.store_host + start.to_bytes(8, "big")).hex().upper() for r, start in zip(records, starts, strict=True)]
        assert [len(i) for i in ids] == [32, 56, 56]
        for record, start, offset_id in zip(records, starts, ids, strict=True):
            r = client.get(f"/v1/messages/{offset_id}")
            assert r.status_code == 200, r.text
            m = r.json()
            assert (m["body"], m["commitlog_offset"], m["offset_msg_id"]) == (record.body.decode(), start, offset_id)
        assert client.get(f"/v1/messages/{ids[1].lower()}").status_code == 200
        problem(client.get(f"/v1/messages/{ids[1][:40]}"), 400, "MESSAGE_ID_INVALID")
        # The id of the IPv6 message with the store host of the IPv4 one: no message has it.
        problem(client.get(f"/v1/messages/{ids[0][:16]}{starts[1]:016X}"), 404, "MESSAGE_NOT_FOUND")
        assert client.put("/v1/topics/hosts", json={"queues": 1}).status_code in (200, 201)  # a pull names a known topic
        pulled = client.get(
            "/v1/topics/hosts/queues/0/messages", params={"offset": 0, "max": 8}, headers={"accept": "application/x-tidemq-batch"}
        )
        messages = decode_stored(pulled.content)  # the client's decoder reads past 20-byte hosts
        assert [(m.body, m.offset_msg_id, m.queue_offset) for m in messages] == [
            (r.body, i, n) for n, (r, i) in enumerate(zip(records, ids, strict=True))
        ]
    finally:
        broker.kill()
