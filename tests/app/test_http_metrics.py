"""/metrics: HTTP requests by route template, method and status; HEAD /healthz."""

from __future__ import annotations

import uuid

import pytest

from store.native import pack_batch
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, MakeBroker
from tests.app.scrape import samples, serve_hot_routes, value

pytestmark = pytest.mark.timeout(90)
PRODUCE = "/v1/topics/{topic}/messages"
PULL = "/v1/topics/{topic}/queues/{queue_id}/messages"
RECEIVE = "/v1/groups/{group}/topics/{topic}/receive"
ACK = "/v1/groups/{group}/topics/{topic}/ack"
PRODUCE_BATCH = "/v1/topics/{topic}/messages/batch"
PULL_BATCH = "/v1/topics/{topic}/queues/{queue_id}/messages/batch"
REQUESTS = "tidemq_http_requests_total"


def counted(scrape: dict[str, list[tuple[dict[str, str], float]]], route: str, method: str, status: str) -> float:
    return value(scrape, REQUESTS, route=route, method=method, status=status)


@pytest.mark.parametrize("hot_routes", ["true", "false"])
def test_each_request_is_counted_under_its_route_template(make_broker: MakeBroker, hot_routes: str) -> None:
    broker = make_broker(SMALL_STORE + SMALL_BROKER + f"hot_routes = {hot_routes}\n")
    c = broker.client
    assert c is not None
    topic, group = "orders-" + uuid.uuid4().hex[:8], "billing-" + uuid.uuid4().hex[:8]
    before = samples(c.get("/metrics").text)
    serve_hot_routes(c, topic, group)
    batch = pack_batch([(b"ok", b"", 0)])
    produced = c.post(f"/v1/topics/{topic}/messages/batch", content=batch, headers={"content-type": "application/octet-stream"})
    assert produced.status_code == 201, produced.text
    assert c.get(f"/v1/topics/{topic}/queues/0/messages/batch", params={"offset": 0}).status_code == 200
    assert c.get(f"/no/such/{topic}").status_code == 404
    after = samples(c.get("/metrics").text)
    for route, method, status in [
        (PRODUCE, "POST", "201"),
        (PULL, "GET", "200"),
        (RECEIVE, "POST", "200"),
        (ACK, "POST", "200"),
        (PRODUCE_BATCH, "POST", "201"),
        (PULL_BATCH, "GET", "200"),
        ("/healthz", "GET", "200"),
        ("/healthz", "HEAD", "200"),
        ("other", "GET", "404"),
    ]:
        assert counted(after, route, method, status) - counted(before, route, method, status) == 1, (route, method, status)
    assert counted(after, "/metrics", "GET", "200") >= 1
    routes = {labels["route"] for labels, _ in after[REQUESTS]}
    assert not [r for r in routes if topic in r or group in r], routes  # templates, never raw paths
    # Bytes: GET /healthz's 15-byte body per request, HEAD's none.
    assert value(after, "tidemq_http_response_bytes_total", route="/healthz", method="HEAD", status="200") == 0
    gets = counted(after, "/healthz", "GET", "200")
    assert value(after, "tidemq_http_response_bytes_total", route="/healthz", method="GET", status="200") == 15 * gets


def test_the_latency_histogram_agrees_with_the_request_counts(make_broker: MakeBroker) -> None:
    c = make_broker().client
    assert c is not None
    serve_hot_routes(c, "t-" + uuid.uuid4().hex[:8], "g-" + uuid.uuid4().hex[:8])
    scrape = samples(c.get("/metrics").text)
    for labels, requests in scrape[REQUESTS]:
        series = {k: labels[k] for k in ("route", "method", "status")}
        buckets = [
            (lab["le"], v) for lab, v in scrape["tidemq_http_request_duration_seconds_bucket"] if {**lab, "le": ""} == {**series, "le": ""}
        ]
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1] == ("+Inf", requests), (series, buckets)
        assert value(scrape, "tidemq_http_request_duration_seconds_count", **series) == requests
        assert value(scrape, "tidemq_http_request_duration_seconds_sum", **series) > 0


def test_head_healthz_answers_like_get_without_a_body(make_broker: MakeBroker) -> None:
    for hot_routes in ("true", "false"):
        c = make_broker(SMALL_STORE + SMALL_BROKER + f"hot_routes = {hot_routes}\n", name=f"hot-{hot_routes}").client
        assert c is not None
        get, head = c.get("/healthz"), c.head("/healthz")
        assert head.status_code == get.status_code == 200
        assert head.content == b"" and get.json() == {"status": "ok"}
        assert head.headers["content-type"] == get.headers["content-type"] == "application/json"
        assert head.headers["content-length"] == get.headers["content-length"] == str(len(get.content))
