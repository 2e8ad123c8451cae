"""Transactional messages over HTTP, on real broker processes: a half message is invisible until
committed, a commit is delivered exactly once, a rollback never; 409 / 404 answers; producer
groups' check URL; check-back answered by a tiny HTTP server in the test (commit, rollback,
unknown, slow, failing); listing unresolved transactions; rollback after transaction_check_max;
and SIGKILL with committed, rolled back and pending transactions."""

from __future__ import annotations

import base64
import json
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from store import PRODUCER_GROUP_MAX_BYTES, pack_batch
from tests.app.conftest import ROOT, SMALL_BROKER, SMALL_STORE, MakeBroker
from tests.app.helpers import problem, wait_dispatched
from tests.waiting import wait_for

BATCH = "application/x-tidemq-batch"
# Small check settings: a transaction is "unknown" after 300 ms, checked every 200 ms, rolled back after 3 checks.
CHECK_STORE = SMALL_STORE + "transaction_timeout_ms = 300\ntransaction_check_interval_ms = 200\ntransaction_check_max = 3\n"
CHECK_BROKER = SMALL_BROKER + "transaction_check_timeout_ms = 300\n"


def create(client: httpx.Client, topic: str, queues: int = 1) -> None:
    assert client.put(f"/v1/topics/{topic}", json={"queues": queues}).status_code in (200, 201)


def half(client: httpx.Client, topic: str, body: str, group: str = "pg", queue_id: int = 0) -> dict[str, Any]:
    r = client.post(f"/v1/topics/{topic}/messages", json={"body": body, "queue_id": queue_id, "transaction": {"producer_group": group}})
    assert r.status_code == 201, r.text
    reply: dict[str, Any] = r.json()
    assert reply["transaction_id"] and reply["queue_offset"] is None
    return reply


def resolve(client: httpx.Client, transaction_id: str, action: str) -> httpx.Response:
    return client.post(f"/v1/transactions/{transaction_id}", json={"action": action})


def bodies(client: httpx.Client, topic: str, queue_id: int = 0, wait_ms: int = 0) -> list[str]:
    r = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": 0, "max": 256, "wait_ms": wait_ms})
    assert r.status_code == 200, r.text
    return [m["body"] for m in r.json().get("messages", [])]


def pending(client: httpx.Client, group: str, state: str = "pending") -> list[dict[str, Any]]:
    r = client.get(f"/v1/producer-groups/{group}/transactions", params={"state": state})
    assert r.status_code == 200, r.text
    transactions: list[dict[str, Any]] = r.json()["transactions"]
    return transactions


# Commit, rollback, conflicts --------------------------------------------------------------


def test_half_is_invisible_until_commit_then_delivered_exactly_once(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    reply = half(client, topic, "order-1")
    wait_dispatched(client)
    assert bodies(client, topic) == []
    assert client.get(f"/v1/topics/{topic}").json()["queues"][0]["max_offset"] == 0
    r = resolve(client, reply["transaction_id"], "commit")
    assert r.status_code == 200, r.text
    assert r.json() == {"transaction_id": reply["transaction_id"], "state": "committed", "changed": True}
    assert bodies(client, topic, wait_ms=2000) == ["order-1"]
    again = resolve(client, reply["transaction_id"], "commit")
    assert again.status_code == 200 and again.json()["changed"] is False
    body = problem(resolve(client, reply["transaction_id"], "rollback"), 409, "TRANSACTION_RESOLVED")
    assert body["state"] == "committed"
    wait_dispatched(client)
    assert bodies(client, topic) == ["order-1"]


def test_rollback_is_never_delivered(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    r = client.post(f"/v1/topics/{topic}/messages", content=b"raw-half", headers={"Content-Type": "application/octet-stream",
                    "X-Tidemq-Transaction": "pg-raw"}, params={"queue_id": 0})  # fmt: skip
    assert r.status_code == 201, r.text
    tid = r.json()["transaction_id"]
    assert resolve(client, tid, "rollback").json() == {"transaction_id": tid, "state": "rolled_back", "changed": True}
    assert resolve(client, tid, "rollback").json()["changed"] is False
    problem(resolve(client, tid, "commit"), 409, "TRANSACTION_RESOLVED")
    wait_dispatched(client)
    assert bodies(client, topic) == []


def test_binary_batch_with_the_header_is_one_transaction_per_message(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    batch = pack_batch([(b"b0", b"", 0), (b"b1", b"TAGS\x01x\x02", 0)])
    r = client.post(f"/v1/topics/{topic}/messages", content=batch, headers={"Content-Type": BATCH, "X-Tidemq-Transaction": "pg-bin"},
                    params={"queue_id": 0})  # fmt: skip
    assert r.status_code == 201, r.text
    reply = r.json()
    assert reply["first_queue_offset"] is None and len(reply["transaction_ids"]) == 2
    assert resolve(client, reply["transaction_ids"][1], "commit").status_code == 200
    assert resolve(client, reply["transaction_ids"][0], "rollback").status_code == 200
    assert bodies(client, topic, wait_ms=2000) == ["b1"]


def test_unknown_or_malformed_transaction_id_is_404(client: httpx.Client) -> None:
    problem(resolve(client, "7F00000100002A9F00000000FFFFFF00", "commit"), 404, "TRANSACTION_NOT_FOUND")
    problem(resolve(client, "not-an-id", "rollback"), 404, "TRANSACTION_NOT_FOUND")
    problem(client.post("/v1/transactions/x", json={"action": "maybe"}), 400, "BODY_INVALID")


def test_a_plain_message_id_is_not_a_transaction(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    plain = client.post(f"/v1/topics/{topic}/messages", json={"body": "plain", "queue_id": 0}).json()
    problem(resolve(client, plain["offset_msg_id"], "commit"), 404, "TRANSACTION_NOT_FOUND")


def test_bad_transactional_produce_is_refused(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    url = f"/v1/topics/{topic}/messages"
    problem(client.post(url, json={"body": "x", "delay_ms": 1000, "transaction": {"producer_group": "pg"}}), 400, "TRANSACTION_INVALID")
    problem(client.post(url, json={"body": "x", "transaction": {"producer_group": "bad group"}}), 400, "PRODUCER_GROUP_INVALID")
    problem(client.post(url, json={"body": "x", "transaction": {"group": "pg"}}), 400, "BODY_INVALID")
    problem(client.post(url, json={"body": "x", "properties": {"TRAN_MSG": "true"}}), 400, "PROPERTIES_INVALID")
    mixed = {"messages": [{"body": "a", "transaction": {"producer_group": "pg"}}, {"body": "b"}]}
    problem(client.post(url, json=mixed), 400, "REQUEST_INVALID")


# Producer groups and listing ---------------------------------------------------------------


def test_producer_group_check_url_is_validated_and_kept(client: httpx.Client) -> None:
    problem(client.put("/v1/producer-groups/pg-v", json={"check_url": "ftp://x/y"}), 400, "CHECK_URL_INVALID")
    problem(client.put("/v1/producer-groups/pg-v", json={"check_url": "http://h/" + "a" * 3000}), 400, "CHECK_URL_INVALID")
    problem(client.put("/v1/producer-groups/pg-v", json={"check_url": "/relative"}), 400, "CHECK_URL_INVALID")
    problem(client.put("/v1/producer-groups/bad%20name", json={}), 400, "PRODUCER_GROUP_INVALID")
    problem(client.get("/v1/producer-groups/pg-never"), 404, "PRODUCER_GROUP_NOT_FOUND")
    r = client.put("/v1/producer-groups/pg-v", json={"check_url": "http://127.0.0.1:9/check"})
    assert r.status_code == 201 and r.json() == {"producer_group": "pg-v", "check_url": "http://127.0.0.1:9/check", "pending": 0}
    assert client.put("/v1/producer-groups/pg-v", json={"check_url": None}).status_code == 200
    assert client.get("/v1/producer-groups/pg-v").json()["check_url"] is None


def test_a_producer_group_name_has_one_limit_that_the_spec_and_the_error_state(client: httpx.Client, topic: str) -> None:
    """PRODUCER_GROUP_MAX_BYTES (255) is what the path, the produce body and the check allow; the error says "producer group"."""
    spec = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    path_schema = next(p["schema"] for p in spec["paths"]["/v1/producer-groups/{producer_group}"]["put"]["parameters"])
    assert path_schema["maxLength"] == PRODUCER_GROUP_MAX_BYTES
    assert spec["components"]["schemas"]["TransactionRef"]["properties"]["producer_group"]["maxLength"] == PRODUCER_GROUP_MAX_BYTES
    longest = "p" * PRODUCER_GROUP_MAX_BYTES
    assert client.put(f"/v1/producer-groups/{longest}", json={}).status_code == 201
    create(client, topic)
    sent = client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "transaction": {"producer_group": longest}})
    assert sent.status_code == 201, sent.text
    assert [t["transaction_id"] for t in pending(client, longest)] == [sent.json()["transaction_id"]]
    too_long = longest + "p"
    for reply in (
        client.put(f"/v1/producer-groups/{too_long}", json={}),
        client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "transaction": {"producer_group": too_long}}),
        client.post(
            f"/v1/topics/{topic}/messages",
            content=b"x",
            headers={"X-Tidemq-Transaction": too_long, "content-type": "application/octet-stream"},
        ),
    ):
        detail = problem(reply, 400, "PRODUCER_GROUP_INVALID")["detail"]
        assert f"producer group is longer than {PRODUCER_GROUP_MAX_BYTES} bytes" in detail and "topic" not in detail


def test_unresolved_transactions_are_listed_for_their_group(make_broker: MakeBroker, topic: str) -> None:
    # 3 s: the three halves and the first listing fit in it on a loaded machine.
    broker = make_broker(SMALL_STORE + "transaction_timeout_ms = 3000\ntransaction_check_interval_ms = 60000\n" + SMALL_BROKER)
    c = broker.client
    assert c is not None
    create(c, topic)
    a = half(c, topic, "a", group="pg-list")
    b = half(c, topic, "b", group="pg-list")
    half(c, topic, "other", group="pg-other")
    assert pending(c, "pg-list", "unknown") == []  # not past transaction_timeout_ms yet
    assert [t["transaction_id"] for t in pending(c, "pg-list")] == [a["transaction_id"], b["transaction_id"]]
    # Past transaction_timeout_ms (3 s) both are unknown: waited for, not slept.
    listed = wait_for(lambda: found if len(found := pending(c, "pg-list", "unknown")) == 2 else None, 10.0, "both halves unknown")
    assert listed is not None
    assert [t["transaction_id"] for t in listed] == [a["transaction_id"], b["transaction_id"]]
    assert listed[0]["topic"] == topic and listed[0]["queue_id"] == 0 and listed[0]["msg_id"] == a["msg_id"]
    problem(c.get("/v1/producer-groups/pg-list/transactions", params={"state": "done"}), 400, "REQUEST_INVALID")
    assert resolve(c, a["transaction_id"], "commit").status_code == 200
    assert [t["transaction_id"] for t in pending(c, "pg-list", "unknown")] == [b["transaction_id"]]
    assert c.get("/v1/producer-groups/pg-list").json()["pending"] == 1
    metrics = c.get("/metrics").text
    assert "tidemq_transaction_half_pending 2" in metrics and "tidemq_transaction_committed_total 1" in metrics


# Check-back ----------------------------------------------------------------------------------


class CheckServer:
    """A producer's check endpoint: answers by the message body (commit, rollback, unknown, slow, fail)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(doc)
                body = base64.b64decode(doc["body"]).decode()
                if body.startswith("drip"):
                    # A reply that never ends in time: one byte a second, each within the check timeout.
                    self.send_response(200)
                    self.send_header("Content-Length", "100")
                    self.end_headers()
                    try:
                        for _ in range(100):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(1.0)  # the drip's pace: the reply's time, not a wait for the broker
                    except OSError:
                        pass  # the broker cut the check
                    return
                if body.startswith("slow"):
                    time.sleep(1.0)  # past transaction_check_timeout_ms
                if body.startswith("fail"):
                    self.send_response(500)
                    self.end_headers()
                    return
                answer = json.dumps({"action": body.split("-")[0] if not body.startswith("slow") else "commit"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/check"

    def checks_of(self, transaction_id: str) -> int:
        return sum(1 for r in self.requests if r["transaction_id"] == transaction_id)


@pytest.fixture
def check_server() -> Iterator[CheckServer]:
    server = CheckServer()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


def checked_broker(make_broker: Any, topic: str, group: str, check_server: CheckServer) -> Any:
    """A broker checking back quickly, with `topic` and producer `group` checked back at `check_server`
    (a process: the tests read its log)."""
    broker = make_broker(CHECK_STORE + CHECK_BROKER, process=True)
    create(broker.client, topic)
    assert broker.client.put(f"/v1/producer-groups/{group}", json={"check_url": check_server.url}).status_code == 201
    return broker


def test_check_back_applies_commit_rollback_and_unknown(make_broker: MakeBroker, topic: str, check_server: CheckServer) -> None:
    broker = checked_broker(make_broker, topic, "pg-check", check_server)
    c = broker.client
    commit = half(c, topic, "commit-1", group="pg-check")
    rollback = half(c, topic, "rollback-1", group="pg-check")
    unknown = half(c, topic, "unknown-1", group="pg-check")
    wait_for(lambda: [t["transaction_id"] for t in pending(c, "pg-check")] == [unknown["transaction_id"]], 10.0)
    assert bodies(c, topic, wait_ms=2000) == ["commit-1"]
    first = next(r for r in check_server.requests if r["transaction_id"] == commit["transaction_id"])
    assert first["producer_group"] == "pg-check" and first["topic"] == topic and first["msg_id"] == commit["msg_id"]
    problem(resolve(c, rollback["transaction_id"], "commit"), 409, "TRANSACTION_RESOLVED")
    # "unknown" keeps it pending until transaction_check_max (3) checks, then it is rolled back and logged.
    wait_for(lambda: pending(c, "pg-check") == [], 10.0)
    assert check_server.checks_of(unknown["transaction_id"]) == 3
    problem(resolve(c, unknown["transaction_id"], "commit"), 409, "TRANSACTION_RESOLVED")
    assert "rolled back after 3 checks" in broker.log()
    assert bodies(c, topic) == ["commit-1"]
    metrics = c.get("/metrics").text
    assert 'tidemq_transaction_check_answers_total{answer="unknown"} 3' in metrics
    assert "tidemq_transaction_check_rollbacks_total 1" in metrics


def test_slow_and_failing_check_urls_leave_it_pending_then_roll_back(
    make_broker: MakeBroker, topic: str, check_server: CheckServer
) -> None:
    broker = checked_broker(make_broker, topic, "pg-bad", check_server)
    c = broker.client
    slow = half(c, topic, "slow-1", group="pg-bad")
    fail = half(c, topic, "fail-1", group="pg-bad")
    wait_for(lambda: check_server.checks_of(fail["transaction_id"]) >= 1 and check_server.checks_of(slow["transaction_id"]) >= 1, 10.0)
    assert {t["transaction_id"] for t in pending(c, "pg-bad")} >= {fail["transaction_id"]}
    wait_for(lambda: pending(c, "pg-bad") == [], timeout_s=15.0)
    for t in (slow, fail):
        problem(resolve(c, t["transaction_id"], "commit"), 409, "TRANSACTION_RESOLVED")
    # The slow one's late "commit" answers arrive after its timeout: they are never applied.
    assert bodies(c, topic) == []
    assert 'tidemq_transaction_check_answers_total{answer="failed"}' in c.get("/metrics").text
    assert "check-back of transaction" in broker.log()


def test_a_dripping_check_url_holds_only_its_groups_share_and_never_delays_shutdown(
    make_broker: MakeBroker, topic: str, check_server: CheckServer
) -> None:
    """8 transactions of a group whose check URL drips its reply (one byte a second, each read within
    the 3 s check timeout) do not hold the 8 check slots: another group's 5 transactions are checked
    and committed at once, each drip is cut at the check's total deadline, and SIGTERM stops the broker
    promptly although drips are under way."""
    broker = make_broker(CHECK_STORE + SMALL_BROKER + "transaction_check_timeout_ms = 3000\n", process=True)
    c = broker.client
    assert c is not None
    create(c, topic)
    for group in ("pg-drip", "pg-ok"):
        assert c.put(f"/v1/producer-groups/{group}", json={"check_url": check_server.url}).status_code == 201
    for i in range(8):
        half(c, topic, f"drip-{i}", group="pg-drip")
    wait_for(lambda: sum(1 for r in check_server.requests if r["producer_group"] == "pg-drip") >= 2, 10.0)
    ok = [half(c, topic, f"commit-{i}", group="pg-ok")["transaction_id"] for i in range(5)]
    started = time.monotonic()
    wait_for(lambda: pending(c, "pg-ok") == [], timeout_s=5.0)
    assert time.monotonic() - started < 3.0, "the other group's checks waited for the dripping ones"
    assert sorted(bodies(c, topic)) == sorted(f"commit-{i}" for i in range(5))
    assert {r["transaction_id"] for r in check_server.requests if r["producer_group"] == "pg-ok"} == set(ok)
    # A drip is cut at its deadline (3 s in all), not after its 100 bytes: the group is checked again.
    wait_for(lambda: sum(1 for r in check_server.requests if r["producer_group"] == "pg-drip") >= 4, timeout_s=10.0)
    stopping = time.monotonic()
    assert broker.stop(timeout_s=10.0) == 0, broker.log()
    assert time.monotonic() - stopping < 5.0


def test_a_group_without_check_url_is_rolled_back_after_the_max_checks(make_broker: MakeBroker, topic: str) -> None:
    broker = make_broker(CHECK_STORE + CHECK_BROKER)
    c = broker.client
    assert c is not None
    create(c, topic)
    t = half(c, topic, "never", group="pg-silent")
    wait_for(lambda: pending(c, "pg-silent") == [], 10.0)
    problem(resolve(c, t["transaction_id"], "commit"), 409, "TRANSACTION_RESOLVED")
    assert bodies(c, topic) == []


# SIGKILL -------------------------------------------------------------------------------------


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_sigkill_keeps_committed_once_rolled_back_never_pending_pending(make_broker: MakeBroker, topic: str, flush: str) -> None:
    config = SMALL_STORE + f'flush_disk_type = "{flush}"\ntransaction_check_interval_ms = 60000\n' + SMALL_BROKER
    broker = make_broker(config, process=True)  # killed
    c = broker.client
    assert c is not None
    create(c, topic)
    committed = [half(c, topic, f"c{i}", group="pg-kill") for i in range(3)]
    rolled = [half(c, topic, f"r{i}", group="pg-kill") for i in range(3)]
    waiting = [half(c, topic, f"p{i}", group="pg-kill") for i in range(3)]
    for t in committed:
        assert resolve(c, t["transaction_id"], "commit").status_code == 200
    for t in rolled:
        assert resolve(c, t["transaction_id"], "rollback").status_code == 200
    broker.stop(signal.SIGKILL)  # at once after the last answer

    broker.start()
    c = broker.client
    assert c is not None
    assert sorted(bodies(c, topic, wait_ms=1000)) == ["c0", "c1", "c2"]
    assert [t["transaction_id"] for t in pending(c, "pg-kill")] == [t["transaction_id"] for t in waiting]
    for t in committed:
        assert resolve(c, t["transaction_id"], "commit").json()["changed"] is False
        problem(resolve(c, t["transaction_id"], "rollback"), 409, "TRANSACTION_RESOLVED")
    for t in rolled:
        problem(resolve(c, t["transaction_id"], "commit"), 409, "TRANSACTION_RESOLVED")
    assert resolve(c, waiting[0]["transaction_id"], "commit").json()["changed"] is True
    assert resolve(c, waiting[1]["transaction_id"], "rollback").json()["changed"] is True
    broker.stop(signal.SIGKILL)

    broker.start()
    c = broker.client
    assert c is not None
    assert sorted(bodies(c, topic, wait_ms=1000)) == ["c0", "c1", "c2", "p0"]
    assert [t["transaction_id"] for t in pending(c, "pg-kill")] == [waiting[2]["transaction_id"]]
