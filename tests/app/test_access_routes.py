"""Every operation of openapi/openapi.json against a broker with an ACL: the answer without a
token, with an unknown one, with an account that lacks the permission and with one that has it;
and that no refused request stored or changed anything."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from store import pack_batch
from tests.app.acl_fixtures import BILLING, OPS, as_admin, bearer, start_with_acl
from tests.app.conftest import BrokerProcess, MakeBroker
from tests.app.helpers import problem
from tests.app.in_process import InProcessBroker

ROOT = Path(__file__).resolve().parents[2]
SPEC = json.loads((ROOT / "openapi" / "openapi.json").read_text())
MSG_ID = "0A0000010000000000000000DEADBEEF"
# operationId -> who may call it: "open", "any" (any known account), "admin", "create" (CREATE on {topic},
# which the billing account does not hold), or what the billing account needs: "topic" (PUB/SUB on
# {topic}), "group" ({group} only) or "topic+group".
RULES = {
    "health": "open",
    "healthHead": "open",
    "ready": "open",
    "metrics": "any",
    "getMessage": "any",  # the route checks SUB on the found message's topic (test_access.py)
    "cleanup": "admin",
    "listGroups": "admin",
    "putGroup": "admin",
    "deleteGroup": "admin",
    "resendDeadLetters": "admin",
    "getProducerGroup": "admin",
    "putProducerGroup": "admin",
    "listTransactions": "admin",
    "resolveTransaction": "admin",
    "scheduleStatus": "admin",
    "storeStatus": "admin",
    "storeFiles": "admin",
    "timerStatus": "admin",
    "listTopics": "admin",
    "putTopic": "create",  # CREATE on the topic creates it; changing an existing one needs admin (test_access.py)
    "deleteTopic": "admin",
    "getTopic": "topic",
    "getTopicRoute": "topic",
    "queryMessages": "topic",
    "produce": "topic",
    "produceBinaryBatch": "topic",
    "pull": "topic",
    "pullBatch": "topic",
    "offsetByTime": "topic",
    "getGroup": "group",
    "getOffsets": "topic+group",
    "commitOffsets": "topic+group",
    "ack": "topic+group",
    "changeInvisibleTime": "topic+group",
    "receive": "topic+group",
    "receiveStream": "topic+group",
    "listPushSubscriptions": "admin",
    "putPushSubscription": "topic+group",  # the topic is in the body: the route checks it
    "getPushSubscription": "group",
    "deletePushSubscription": "group",
    "startRedrive": "group",
    "getRedrive": "group",
}
# Valid requests: had the gate let them through, each would store or change something.
BODIES = {
    "produce": {"body": "must-not-be-stored"},
    "produceBinaryBatch": pack_batch([(b"must-not-be-stored", b"", 0)]),
    "putTopic": {},
    "putGroup": {"max_reconsume_times": 3},
    "resendDeadLetters": {"offsets": [0]},
    "commitOffsets": {"topic": "{topic}", "queue_id": 0, "offset": 1},
    "ack": {"receipt_handle": "x"},
    "changeInvisibleTime": {"receipt_handle": "x", "invisible_ms": 5000},
    "putProducerGroup": {"check_url": "http://127.0.0.1:1/check"},
    "resolveTransaction": {"action": "commit"},
    "putPushSubscription": {"topic": "{topic}", "url": "http://127.0.0.1:9/hook", "secret": "a-secret-of-sixteen-or-more"},
    "startRedrive": {"max_messages": 10},
}
QUERIES = {
    "pull": {"wait_ms": "0"},
    "pullBatch": {"offset": "0"},
    "receive": {"wait_ms": "0"},
    "queryMessages": {"key": "k"},
    "offsetByTime": {"timestamp_ms": "0"},
    "getOffsets": {"topic": "{topic}"},
}


def operations() -> list[tuple[str, str, str]]:
    return [(method.upper(), path, op["operationId"]) for path, item in SPEC["paths"].items() for method, op in item.items()]


def test_every_operation_has_a_rule() -> None:
    assert {op for _, _, op in operations()} == set(RULES), "a route without an access rule: add it to RULES and app/access_rules.py"


def fill(text: str, topic: str, group: str) -> str:
    return (
        text.replace("{topic}", topic)
        .replace("{group}", group)
        .replace("{queue_id}", "0")
        .replace("{offset_msg_id}", MSG_ID)
        .replace("{producer_group}", "pg")
        .replace("{transaction_id}", "tx-1")
    )


# A query parameter as httpx takes it.
Param = tuple[str, str | int | float | bool | None]
# The acl_broker fixture: a broker started with the ACL, and a client of its administrator.
AclBroker = tuple[BrokerProcess | InProcessBroker, httpx.Client]


def call(
    client: httpx.Client,
    method: str,
    path: str,
    op: str,
    topic: str,
    group: str,
    token: str | None,
    query: list[Param] | None = None,
) -> tuple[int, str | None, httpx.Headers]:
    """The status, problem code and headers of one request (a stream is closed after its head);
    `query` replaces the operation's usual query parameters."""
    body = BODIES.get(op)
    content = json.dumps(body).replace("{topic}", topic).encode() if body is not None and not isinstance(body, bytes) else body
    params: list[Param] = query if query is not None else [(k, fill(v, topic, group)) for k, v in QUERIES.get(op, {}).items()]
    media = "application/octet-stream" if isinstance(body, bytes) else "application/json"  # a binary batch, or JSON
    headers = {"Content-Type": media, **(bearer(token) if token else {})}
    with client.stream(method, fill(path, topic, group), params=params, content=content, headers=headers) as r:
        code = None
        if r.headers.get("content-type", "").startswith("application/problem+json"):
            r.read()
            code = r.json()["code"]
        return r.status_code, code, r.headers


def snapshot(admin: httpx.Client) -> dict[str, Any]:
    """What a refused request must not change: the commitlog, the topics, groups, offsets, producer groups."""
    offsets = {
        (g, t): admin.get(f"/v1/groups/{g}/offsets", params={"topic": t}).json()
        for g in ("billing", "other")
        for t in ("billing-a", "billingx", "orders")
    }
    return {
        "commitlog": admin.get("/v1/store").json()["runtime"]["commitlog_max_offset"],
        "topics": admin.get("/v1/topics").json(),
        "groups": admin.get("/v1/groups").json(),
        "offsets": offsets,
        "producer_group": admin.get("/v1/producer-groups/pg").status_code,
        "max_offsets": {
            t: [q["max_offset"] for q in admin.get(f"/v1/topics/{t}").json()["queues"]] for t in ("billing-a", "billingx", "orders")
        },
    }


@pytest.fixture
def acl_broker(make_broker: MakeBroker, tmp_path: Path) -> Iterator[AclBroker]:
    broker, _ = start_with_acl(make_broker, tmp_path)
    admin = as_admin(broker)
    for t in ("billing-a", "billingx", "orders"):
        assert admin.put(f"/v1/topics/{t}", json={"queues": 4}).status_code == 201
        assert admin.post(f"/v1/topics/{t}/messages", json={"body": "seed", "queue_id": 0}).status_code == 201
    yield broker, admin
    admin.close()


def test_refused_requests_are_401_or_403_and_change_nothing(acl_broker: AclBroker) -> None:
    broker, admin = acl_broker
    client = broker.client
    assert client is not None
    before = snapshot(admin)
    checked = 0
    for method, path, op in operations():
        rule = RULES[op]
        if rule == "open":
            status, _, _ = call(client, method, path, op, "billing-a", "billing", None)
            assert status not in (401, 403), (method, path)
            continue
        for token in (None, "not-a-known-token"):
            status, code, headers = call(client, method, path, op, "billing-a", "billing", token)
            assert (status, code) == (401, "UNAUTHENTICATED"), (method, path, token)
            assert headers["www-authenticate"] == "Bearer"
            checked += 1
        wrong: list[tuple[str, str]] = []
        if rule in ("admin", "create"):
            wrong = [("billing-a", "billing")]
        if "topic" in rule:
            wrong.append(("billingx", "billing"))  # billing-* must not match billingx
            wrong.append(("billing-secret", "billing"))  # DENY beats billing-* (more specific)
        if "group" in rule:
            wrong.append(("billing-a", "other"))
        if op in ("produce", "produceBinaryBatch"):
            wrong.append(("orders", "billing"))  # SUB only
        for topic, group in wrong:
            status, code, _ = call(client, method, path, op, topic, group, BILLING)
            assert (status, code) == (403, "FORBIDDEN"), (method, path, topic, group)
            checked += 1
    assert checked > 60
    assert snapshot(admin) == before, "a refused request changed the broker's state"


def test_allowed_requests_pass_the_gate(acl_broker: AclBroker) -> None:
    broker, admin = acl_broker
    client = broker.client
    assert client is not None
    for method, path, op in operations():
        rule = RULES[op]
        tokens = [OPS] if rule in ("admin", "create") else [OPS, BILLING]
        for token in tokens:
            status, code, _ = call(client, method, path, op, "billing-a", "billing", token)
            assert code not in ("UNAUTHENTICATED", "FORBIDDEN"), (method, path, token, status, code)
    # The billing account's produce was served: the hot path is behind the gate, not around it.
    r = client.post("/v1/topics/billing-a/messages", json={"body": "ok"}, headers=bearer(BILLING))
    assert r.status_code == 201, r.text
    batch = pack_batch([(b"ok", b"", 0)])
    r = client.post(
        "/v1/topics/billing-a/messages/batch", content=batch, headers={"Content-Type": "application/octet-stream", **bearer(BILLING)}
    )
    assert r.status_code == 201 and r.json()["count"] == 1, r.text
    r = client.get("/v1/topics/billing-a/queues/0/messages/batch", params={"offset": 0}, headers=bearer(BILLING))
    assert r.status_code == 200 and r.headers["x-tidemq-status"] == "FOUND", r.text


def test_paths_outside_the_spec(acl_broker: AclBroker) -> None:
    broker, _ = acl_broker
    client = broker.client
    assert client is not None
    for path in ("/v1/nope", "/docs", "/openapi.json", "/v1/topics/a/b/c", "/v1/groups/g/topics/t/nope"):
        problem(client.get(path), 401, "UNAUTHENTICATED")
    problem(client.get("/v1/nope", headers=bearer(BILLING)), 404, "NOT_FOUND")
    assert client.get("/openapi.json", headers=bearer(BILLING)).status_code == 200
    problem(client.get("/v1/topics/billing-a/messages", headers={"Authorization": f"Basic {BILLING}"}), 401, "UNAUTHENTICATED")
    # HEAD is judged as GET.
    assert client.head("/v1/topics", headers=bearer(BILLING)).status_code == 403


def test_a_repeated_query_parameter_is_refused_on_every_route_that_names_a_topic_or_group(acl_broker: AclBroker) -> None:
    """The gate and the route read one parse: a name given twice is 400 before either reads it, so a
    gate can never judge one value while the route serves another. Every operation of the app's own
    spec that names a topic or a group (in its path or its query) is probed, with every query
    parameter it takes and with topic and group, by an account that may and one that may not."""
    broker, admin = acl_broker
    client = broker.client
    assert client is not None
    spec = client.get("/openapi.json", headers=bearer(OPS)).json()  # the routes the app serves
    before = snapshot(admin)
    values = {"topic": ("billing-a", "billing-secret"), "group": ("billing", "other")}
    probed = set()
    for path, item in spec["paths"].items():
        for method, op in item.items():
            names = {p["name"] for p in op.get("parameters", ()) if p["in"] == "query"}
            if not ({"topic", "group"} & names or "{topic}" in path or "{group}" in path):
                continue
            for name in sorted(names | {"topic", "group"}):
                first, second = values.get(name, ("0", "1"))
                query: list[Param] = [
                    (k, fill(v, "billing-a", "billing")) for k, v in QUERIES.get(op["operationId"], {}).items() if k != name
                ]
                query += [(name, first), (name, second)]
                for token in (OPS, BILLING, None):
                    status, code, _ = call(client, method.upper(), path, op["operationId"], "billing-a", "billing", token, query)
                    assert (status, code) == (400, "REQUEST_INVALID"), (method, path, name, token, status, code)
            probed.add(op["operationId"])
    assert {"getOffsets", "pull", "pullBatch", "receive", "receiveStream", "produce", "commitOffsets", "getTopic"} <= probed
    assert len(probed) >= 15
    assert snapshot(admin) == before, "a refused request changed the broker's state"


def test_the_gate_judges_the_topic_the_route_serves(acl_broker: AclBroker) -> None:
    broker, _ = acl_broker
    client = broker.client
    assert client is not None
    url = "/v1/groups/billing/offsets"
    assert client.get(url, params={"topic": "billing-a"}, headers=bearer(BILLING)).status_code == 200
    problem(client.get(url, params={"topic": "billing-secret"}, headers=bearer(BILLING)), 403, "FORBIDDEN")
    for pair in (("billing-a", "billing-secret"), ("billing-secret", "billing-a")):
        reply = client.get(url, params=[("topic", pair[0]), ("topic", pair[1])], headers=bearer(BILLING))
        assert "topic" in problem(reply, 400, "REQUEST_INVALID")["detail"]
    pull = "/v1/topics/billing-a/queues/0/messages"
    problem(
        client.get(pull, params=[("offset", "0"), ("group", "billing"), ("group", "other")], headers=bearer(BILLING)),
        400,
        "REQUEST_INVALID",
    )
    problem(client.get(pull, params={"offset": "0", "group": "other"}, headers=bearer(BILLING)), 403, "FORBIDDEN")
