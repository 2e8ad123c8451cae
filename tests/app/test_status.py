"""Operations endpoints, framework errors as problem+json, and an app whose store is not running."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.server import create_app
from app.settings import BrokerSettings
from store import MessageStoreConfig
from tests.app.conftest import BrokerProcess
from tests.app.helpers import problem, send
from tests.app.in_process import InProcessBroker
from tests.app.test_produce import create
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def test_health_and_ready(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert match, f"{name} missing"
    return float(match.group(1))


def test_metrics_count_puts_and_gets(client: httpx.Client, topic: str) -> None:
    before = client.get("/metrics")
    assert before.headers["content-type"].startswith("text/plain")
    put_before = metric(before.text, "tidemq_put_messages_total")
    found_before = metric(before.text, "tidemq_get_found_total")
    create(client, topic)
    for i in range(3):
        send(client, topic, f"m{i}")
    client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0})
    text = client.get("/metrics").text
    assert metric(text, "tidemq_put_messages_total") == put_before + 3
    assert metric(text, "tidemq_get_found_total") >= found_before + 1
    assert metric(text, "tidemq_put_bytes_total") > 0
    assert metric(text, 'tidemq_put_latency_seconds_bucket{le="+Inf"}') == metric(text, "tidemq_put_latency_seconds_count")
    assert metric(text, "tidemq_commitlog_max_offset") >= metric(text, "tidemq_commitlog_min_offset")
    assert metric(text, "tidemq_dispatch_lag_bytes") >= 0
    assert 0 <= metric(text, "tidemq_disk_used_ratio") <= 1
    assert metric(text, "tidemq_held_pulls") == 0
    assert metric(text, "tidemq_ready") == 1
    assert metric(text, "tidemq_cleanup_commitlog_files_deleted_total") >= 0
    assert "tidemq_ha_" not in text  # a standalone broker has no replication series
    assert re.search(r'^tidemq_put_tps\{window="10s"\} ', text, re.M)
    # Every sample line belongs to a declared metric of the tidemq_ family.
    declared = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = re.match(r"[a-z_]+", line)
            assert match is not None, line
            name = match.group(0)
            assert name.startswith("tidemq_") and any(name.startswith(d) for d in declared), line


def test_problem_counter(client: httpx.Client) -> None:
    client.get("/v1/topics/a.b")
    assert metric(client.get("/metrics").text, 'tidemq_http_problems_total{code="TOPIC_INVALID"}') >= 1


def test_store_status(client: httpx.Client) -> None:
    status = client.get("/v1/store").json()
    assert status["ready"] is True and status["flush_mode"] == "ASYNC_FLUSH" and status["role"] == "ASYNC_MASTER"
    runtime = status["runtime"]
    for key in ("commitlog_min_offset", "commitlog_max_offset", "commitlog_committed_offset", "commitlog_flushed_offset", "reput_offset"):
        assert isinstance(runtime[key], int)
    assert runtime["dispatch_lag_bytes"] >= 0 and 0 <= runtime["disk_used_ratio"] <= 1
    assert status["config"]["mapped_file_size_commit_log_bytes"] == 262144
    assert status["ha"] == {"role": "standalone"}
    cleanup = runtime["cleanup"]
    assert cleanup["next_pass_ms"] > 0 and cleanup["commitlog_files_deleted"] >= 0
    assert cleanup["disk_warning_ratio"] > cleanup["disk_clean_forcibly_ratio"] > cleanup["disk_max_used_ratio"]


def test_store_files_match_the_disk(shared_broker: BrokerProcess | InProcessBroker, client: httpx.Client, topic: str) -> None:
    create(client, topic)
    send(client, topic, "x", queue_id=0)

    def settled_listing() -> dict[str, Any] | None:
        # A commitlog file being made ahead lists as 0 bytes between its creation and its sizing.
        listing = client.get("/v1/store/files").json()
        settled = all(f["size_bytes"] > 0 for f in listing["files"] if f["kind"] == "commitlog")
        return listing if settled else None

    listing = wait_for(settled_listing, 5.0, "the files made ahead to be sized")
    assert listing is not None  # wait_for answers a truthy value
    root = Path(listing["root"])
    assert root == shared_broker.store_dir.resolve() or root == shared_broker.store_dir
    assert not listing["truncated"] and listing["total_bytes"] == sum(f["size_bytes"] for f in listing["files"])
    kinds = {f["kind"] for f in listing["files"]}
    assert {"commitlog", "consumequeue", "index", "config"} <= kinds
    assert any(f["path"].startswith(f"consumequeue/{topic}/0/") for f in listing["files"])
    commitlog = [f for f in listing["files"] if f["kind"] == "commitlog"]
    assert commitlog and all(f["size_bytes"] == 262144 and f["path"] == f"commitlog/{int(f['path'][10:]):020d}" for f in commitlog)
    assert [f["path"] for f in listing["files"]] == sorted(f["path"] for f in listing["files"])


def test_framework_errors_are_problems(client: httpx.Client) -> None:
    assert "/docs" in problem(client.get("/nope"), 404, "NOT_FOUND")["detail"]
    problem(client.get("/v1/topics/a/b/c/d"), 404, "NOT_FOUND")
    r = problem(client.patch("/v1/topics"), 405, "METHOD_NOT_ALLOWED")
    assert r["instance"] == "/v1/topics"
    assert client.post("/healthz").headers["allow"] == "GET, HEAD"
    # Every method of the path, not only the first route's.
    problem(client.patch("/v1/topics/some-topic"), 405, "METHOD_NOT_ALLOWED")
    assert client.patch("/v1/topics/some-topic").headers["allow"] == "DELETE, GET, PUT"


def test_an_app_whose_store_is_not_running(tmp_path: Path) -> None:
    """Without the lifespan (store never loaded) nothing is ready and puts are refused, not failed."""
    settings = BrokerSettings(store_dir=str(tmp_path / "s"), store=MessageStoreConfig(mapped_file_size_commit_log_bytes=1 << 23)).validate()
    app = create_app(settings)

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as c:
            assert (await c.get("/healthz")).status_code == 200
            problem(await c.get("/readyz"), 503, "SERVICE_NOT_AVAILABLE")
            problem(await c.get("/v1/store"), 503, "SERVICE_NOT_AVAILABLE")
            problem(await c.get("/v1/store/files"), 503, "SERVICE_NOT_AVAILABLE")
            r = await c.post("/v1/topics/t/messages", json={"body": "x"})
            problem(r, 503, "SHUTTING_DOWN")
            assert r.headers["retry-after"] == "1"
            assert "tidemq_ready 0" in (await c.get("/metrics")).text

    try:
        asyncio.run(scenario())
    finally:
        app.state.broker.executor.shutdown()


def test_reads_past_the_bound_are_refused(tmp_path: Path) -> None:
    config = MessageStoreConfig(mapped_file_size_commit_log_bytes=1 << 23)
    settings = BrokerSettings(store_dir=str(tmp_path / "s"), max_pending_reads=1, read_threads=1, store=config).validate()
    app = create_app(settings)
    broker = app.state.broker
    release = threading.Event()

    async def scenario() -> None:
        await broker.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as c:
                assert (await c.put("/v1/topics/t", json={"queues": 1})).status_code == 201
                blocker = asyncio.ensure_future(broker.run(release.wait, 10))  # the one reader slot, taken
                await asyncio.sleep(0)  # the blocker's first step runs now: it takes the slot before its first await
                r = await c.get("/v1/topics/t/messages", params={"key": "k"})  # index queries always use the pool
                problem(r, 503, "READS_BUSY")
                assert r.headers["retry-after"] == "1"
                release.set()
                assert await blocker is True
                assert (await c.get("/v1/topics/t/messages", params={"key": "k"})).json() == {"messages": []}
        finally:
            release.set()
            await broker.stop()

    asyncio.run(scenario())


def raw_post(base_url: httpx.URL, path: str, content_length: str) -> tuple[int, dict[str, Any]]:
    """A POST whose head declares `content_length` (no HTTP library sends a wrong one), its body never sent."""
    with socket.create_connection((base_url.host, base_url.port), timeout=15) as sock:
        head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: text/plain\r\ncontent-length: {content_length}\r\n\r\n"
        sock.sendall(head.encode())
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    return status, orjson.loads(reply.split(b"\r\n\r\n", 1)[1])


def test_the_body_limit_replies_are_counted_with_every_other_problem(client: httpx.Client) -> None:
    def count(code: str) -> float:
        text = client.get("/metrics").text
        return metric(text, f'tidemq_http_problems_total{{code="{code}"}}') if f'code="{code}"' in text else 0

    too_large, bad_length = count("BODY_TOO_LARGE"), count("REQUEST_INVALID")
    for path in ("/v1/topics/t/messages", "/v1/groups/g/topics/t/ack", "/v1/topics/t"):  # hot routes and a FastAPI one
        status, body = raw_post(client.base_url, path, str(10**12))
        assert status == 413 and body["code"] == "BODY_TOO_LARGE"
    status, body = raw_post(client.base_url, "/v1/topics/t/messages", "12x")
    assert status == 400 and body["code"] == "REQUEST_INVALID"
    assert count("BODY_TOO_LARGE") == too_large + 3 and count("REQUEST_INVALID") == bad_length + 1
