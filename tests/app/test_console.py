"""The web console in headless Chromium against a real broker: every page loads without console
errors or requests to other hosts, shows the broker's real data, and its actions (search, create,
delete, reset an offset) reach the broker. Screenshots land in tests/artifacts/console/."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.browser import Watched, browser_context, require_chromium, screenshot, watch
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, running_broker
from tests.app.in_process import InProcessBroker
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
TOPIC = "orders"
ORDER = {"order": 17, "state": "paid"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | InProcessBroker]:
    require_chromium()
    yield from running_broker(tmp_path_factory, "console", SMALL_STORE + SMALL_BROKER)


@pytest.fixture(scope="module")
def seeded(broker: BrokerProcess | InProcessBroker) -> dict[str, Any]:
    """Topics, messages (text, JSON, binary, delayed), offsets and group consumption to look at."""
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{TOPIC}", json={"queues": 2}).status_code in (200, 201)
    sent = {}
    sent["text"] = c.post(
        f"/v1/topics/{TOPIC}/messages", json={"body": "order 1 created", "keys": ["order-1"], "tags": "created", "queue_id": 0}
    ).json()
    sent["json"] = c.post(f"/v1/topics/{TOPIC}/messages", json={"body": json.dumps(ORDER), "keys": ["order-17"], "queue_id": 0}).json()
    raw = c.post(
        f"/v1/topics/{TOPIC}/messages?queue_id=1", content=bytes([0, 1, 2, 250, 255]), headers={"content-type": "application/octet-stream"}
    )
    assert raw.status_code == 201, raw.text
    sent["binary"] = raw.json()
    assert c.post(f"/v1/topics/{TOPIC}/messages", json={"body": "later", "delay_level": 9, "queue_id": 1}).status_code == 201
    assert c.post(f"/v1/topics/{TOPIC}/messages", json={"body": "timed", "delay_ms": 3_600_000, "queue_id": 1}).status_code == 201
    assert c.put("/v1/groups/billing/offsets", json={"topic": TOPIC, "queue_id": 0, "offset": 1}).status_code == 200
    got = c.post(f"/v1/groups/shipping/topics/{TOPIC}/receive?max=2&invisible_ms=60000").json()["messages"]
    assert got
    acked = c.post(f"/v1/groups/shipping/topics/{TOPIC}/ack", json={"receipt_handles": [got[0]["receipt_handle"]]})
    assert acked.status_code == 200, acked.text
    sent["received"] = len(got)
    # A dead letter: a group allowed no redelivery leaves its message unacked (on a topic of its own).
    assert c.put("/v1/topics/poison", json={"queues": 1}).status_code == 201
    assert c.put("/v1/groups/dlq-g", json={"max_reconsume_times": 0}).status_code in (200, 201)
    assert c.post("/v1/topics/poison/messages", json={"body": "bad order", "queue_id": 0}).status_code == 201
    assert c.post("/v1/groups/dlq-g/topics/poison/receive?invisible_ms=1000").json()["messages"]
    wait_for(lambda: c.get("/v1/groups/dlq-g").json()["dead_letters"] >= 1, 30, what="a dead letter", poll_s=0.1)
    return sent


@pytest.fixture(scope="module")
def context(broker: BrokerProcess | InProcessBroker, seeded: dict[str, Any]) -> Iterator[Any]:
    yield from browser_context(broker.url)


def open_console(context: Any, broker: BrokerProcess | InProcessBroker, route: str) -> tuple[Any, Watched]:
    page = context.new_page()
    watched = watch(page, broker.url)
    page.goto(f"/console#/{route}")
    page.wait_for_selector(f'body[data-route="{route}"]')
    return page, watched


def clean(page: Any, watched: Watched, name: str) -> None:
    """The page's screenshot is saved, and it logged no error and asked no other host for anything."""
    screenshot(page, name)
    page.close()
    assert watched.errors == [], watched.errors
    assert watched.foreign == [], watched.foreign


def test_overview_shows_topics_store_figures_and_live_rates(context: Any, broker: BrokerProcess | InProcessBroker) -> None:
    page, watched = open_console(context, broker, "")
    row = page.locator("#overview-topics tr", has_text=TOPIC)
    assert row.locator("td").nth(3).inner_text() == "3"  # text, JSON and binary; the delayed two wait in other topics
    assert page.locator("#card-role").inner_text().endswith("ASYNC_FLUSH")
    assert "standalone" in page.locator("#card-replication").inner_text()
    # The rate line appears after two samples of /metrics; a produce between them makes it non-zero.
    page.wait_for_selector('#chart-rates polyline[data-series="put"][points*=","]', state="attached")
    assert broker.client is not None
    broker.client.post(f"/v1/topics/{TOPIC}/messages", json={"body": "tick", "queue_id": 1})
    page.wait_for_function("() => !document.querySelector('#chart-rates .legend0').textContent.endsWith(' 0/s')")
    clean(page, watched, "overview")


def test_topics_page_lists_queues_creates_and_deletes(context: Any, broker: BrokerProcess | InProcessBroker) -> None:
    client = broker.client
    assert client is not None
    page, watched = open_console(context, broker, "topics")
    row = page.locator("#topics-table tr", has_text=TOPIC).first
    queues = client.get(f"/v1/topics/{TOPIC}").json()["queues"]
    assert row.locator(".mono").inner_text() == ", ".join(f"{q['queue_id']}: {q['min_offset']}…{q['max_offset']}" for q in queues)
    # The put rate is sampled from the queues' max offsets: puts between two samples show as a rate.
    spark = f'#topics-table .spark[data-topic="{TOPIC}"]'
    page.wait_for_selector(f'{spark} polyline[data-series="put"][points*=","]', state="attached")
    # And what a group receives between two samples shows as its received rate.
    receive = f"/v1/groups/rate-watch/topics/{TOPIC}/receive?max=16&invisible_ms=60000"
    received = len(client.post(receive).json()["messages"])
    client.post(f"/v1/topics/{TOPIC}/messages", json={"messages": [{"body": "burst"}] * 5})
    received += len(client.post(receive).json()["messages"])
    assert received > 0
    # What pulls return between two samples shows as its pulled rate (/metrics' per-topic counter).
    pulled = client.get(f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": 0, "max": 32}).json()["messages"]
    assert pulled
    legend = f"#topics-table .spark[data-topic='{TOPIC}'] .legend"
    page.wait_for_function(f"() => !document.querySelector(\"{legend}0\").textContent.startsWith('put 0/s')")
    page.wait_for_function(f'() => !/^pulled (0\\/s|-)/.test(document.querySelector("{legend}1").textContent)')
    page.wait_for_function(f'() => !/^received (0\\/s|-)/.test(document.querySelector("{legend}2").textContent)')
    page.fill("#create-topic input[name=topic]", "made-in-console")
    page.fill("#create-topic input[name=queues]", "3")
    page.click("#create-topic button[type=submit]")
    page.wait_for_selector("#topics-table >> text=made-in-console")
    assert client.get("/v1/topics/made-in-console").json()["read_queues"] == 3
    screenshot(page, "topics")
    made = page.locator("#topics-table tr", has_text="made-in-console")
    made.get_by_role("button", name="Delete").click()
    assert client.get("/v1/topics/made-in-console").status_code == 200  # one click only asks
    made.get_by_role("button", name="Yes, delete").click()
    page.wait_for_selector("text=Topic made-in-console deleted")
    assert client.get("/v1/topics/made-in-console").status_code == 404
    assert page.locator("#topics-table tr", has_text="made-in-console").count() == 0
    clean(page, watched, "topics-after-delete")


def test_a_bad_topic_name_shows_the_problem(context: Any, broker: BrokerProcess | InProcessBroker) -> None:
    page, watched = open_console(context, broker, "topics")
    page.fill("#create-topic input[name=topic]", "x" * 127)
    page.fill("#create-topic input[name=queues]", "100000")
    page.click("#create-topic button[type=submit]")
    problem = page.wait_for_selector(".problem")
    assert "400 QUEUE_COUNT_INVALID" in problem.inner_text()
    screenshot(page, "problem")
    page.close()
    assert all("400" in e for e in watched.errors), watched.errors  # the browser logs the refused request itself


def test_topic_page_browses_searches_and_previews(
    context: Any,
    broker: BrokerProcess | InProcessBroker,
    seeded: dict[str, Any],
) -> None:
    page, watched = open_console(context, broker, f"topics/{TOPIC}")
    # The newest messages are shown as the page opens, without a click.
    assert page.locator("#results[data-by=newest] .messages >> text=" + seeded["text"]["msg_id"]).count() == 1
    # A message produced from the form reaches the broker and heads the newest messages.
    page.fill("#produce textarea[name=body]", "sent from the console")
    page.fill("#produce input[name=keys]", "console-1")
    page.fill("#produce textarea[name=properties]", "origin=console")
    page.select_option("#produce select[name=queue]", "1")
    page.click("#produce button[type=submit]")
    page.wait_for_selector("#produce-result .ok")
    page.wait_for_selector("#results[data-by=newest] .messages tbody tr:first-child >> text=sent from the console")
    assert broker.client is not None
    (made,) = broker.client.get(f"/v1/topics/{TOPIC}/messages", params={"key": "console-1"}).json()["messages"]
    assert made["queue_id"] == 1 and made["properties"] == {"origin": "console"}
    page.click("#browse button[type=submit]")
    page.wait_for_selector("#results .messages >> text=" + seeded["text"]["msg_id"])
    # Search by key finds the produced message; open it and look at its body as JSON and hex.
    page.select_option("#search select[name=by]", "key")
    page.fill("#search input[name=text]", "order-17")
    page.click("#search button[type=submit]")
    page.wait_for_selector("#results[data-by=key]")
    assert page.locator("#results .messages tbody tr").count() == 1
    page.get_by_role("button", name=seeded["json"]["msg_id"]).click()
    page.click("#message-detail button[data-mode=json]")
    assert json.loads(page.inner_text("#message-body")) == ORDER
    page.click("#message-detail button[data-mode=hex]")
    assert page.inner_text("#message-body").startswith("00000000  7b 22 6f 72")  # {"or
    with page.expect_download() as download:
        page.click("#download")
    assert Path(download.value.path()).read_bytes() == json.dumps(ORDER).encode()
    screenshot(page, "topic-json")
    # By client message id, then by time range only: the binary message shows in hex and downloads whole.
    page.select_option("#search select[name=by]", "msg_id")
    page.fill("#search input[name=text]", seeded["binary"]["msg_id"])
    page.click("#search button[type=submit]")
    page.wait_for_selector("#results[data-by=msg_id]")
    page.get_by_role("button", name=seeded["binary"]["msg_id"]).click()
    page.click("#message-detail button[data-mode=hex]")
    assert page.inner_text("#message-body").startswith("00000000  00 01 02 fa ff")
    with page.expect_download() as download:
        page.click("#download")
    assert Path(download.value.path()).read_bytes() == bytes([0, 1, 2, 250, 255])
    # A time range reads every queue to its end (no cap per queue): 70 more in queue 0 are all found.
    broker.client.post(
        f"/v1/topics/{TOPIC}/messages", json={"messages": [{"body": f"bulk {i}"} for i in range(70)]}, params={"queue_id": "0"}
    )
    page.select_option("#search select[name=by]", "time")
    page.fill("#search input[name=text]", "")
    page.click("#search button[type=submit]")
    page.wait_for_selector("#results[data-by=time]")
    found = page.locator("#results .messages").inner_text()
    assert all(seeded[kind]["msg_id"] in found for kind in ("text", "json", "binary"))
    assert all(f"bulk {i}" in found for i in range(70))
    clean(page, watched, "topic")


def test_groups_pages_show_offsets_counts_and_reset_to_a_time(
    context: Any, broker: BrokerProcess | InProcessBroker, seeded: dict[str, Any]
) -> None:
    client = broker.client
    assert client is not None
    page, watched = open_console(context, broker, "groups")
    shipping = page.locator("#groups-table tr", has_text="shipping").first
    cells = shipping.locator("td").all_inner_texts()
    assert cells[0] == "shipping" and cells[1] == TOPIC and cells[3] == str(seeded["received"]) and cells[4] == "1"  # received, acked
    screenshot(page, "groups")
    page.close()
    page, watched = open_console(context, broker, "groups/billing")
    table = page.locator(f'table.offsets[data-topic="{TOPIC}"]')
    assert table.locator("tr").nth(1).locator("td").nth(1).inner_text() == "1"  # queue 0's committed offset
    # Reset to a time after every message: each queue's offset moves to its end.
    page.fill("input[name=at]", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3600)))
    page.get_by_role("button", name="Reset").click()
    page.get_by_role("button", name="Yes, reset").click()
    done = page.wait_for_selector(".reset .ok")
    assert done.inner_text().startswith("Reset to ")
    offsets = client.get(f"/v1/groups/billing/offsets?topic={TOPIC}").json()["queues"]
    assert all(q["committed_offset"] == q["max_offset"] and q["lag"] == 0 for q in offsets), offsets
    # The page shows the new offsets and lag, and the confirmation is folded away again.
    page.wait_for_function("() => document.querySelector('p.counts').textContent.endsWith('lag 0')")
    assert page.locator("table.offsets tbody td:nth-child(5)").all_inner_texts() == ["0"] * len(offsets)
    assert page.get_by_role("button", name="Yes, reset").count() == 0
    clean(page, watched, "group")


def test_group_page_shows_consumers_and_sends_dead_letters_back(
    context: Any, broker: BrokerProcess | InProcessBroker, seeded: dict[str, Any]
) -> None:
    client = broker.client
    assert client is not None
    page, watched = open_console(context, broker, "groups/dlq-g")
    consumer = page.locator("#consumers-table tbody tr").first.locator("td").all_inner_texts()
    assert consumer[0] == "127.0.0.1" and consumer[1].startswith("python-httpx/") and consumer[5] == "poison", consumer
    dead = page.locator("#dead-letters-table tbody tr").first.locator("td").all_inner_texts()
    assert dead[:3] == ["0", "poison", "1"] and "bad order" in dead[5], dead
    page.locator("#dead-letters-table tbody tr").first.get_by_role("button", name="Resend").click()
    page.get_by_role("button", name="Yes, resend").click()
    assert page.wait_for_selector("#resend-result .ok").inner_text().startswith("Sent 1 back to dlq-g")
    again = client.post("/v1/groups/dlq-g/topics/poison/receive?wait_ms=3000").json()["messages"]
    assert [(m["body"], m["reconsume_times"]) for m in again] == [("bad order", 0)]  # the group's, with its attempts from 0
    assert client.post("/v1/groups/other-g/topics/poison/receive").json()["messages"][0]["body"] == "bad order"  # the topic's one
    clean(page, watched, "group-dead-letters")


def test_delayed_page_shows_waiting_messages(context: Any, broker: BrokerProcess | InProcessBroker) -> None:
    page, watched = open_console(context, broker, "delayed")
    level9 = page.locator("#levels-table tr").nth(9).locator("td").all_inner_texts()
    assert level9[0] == "9" and level9[2] == "1"
    assert broker.client is not None
    pending = broker.client.get("/v1/timers").json()["pending"]
    assert pending >= 1  # the delay_ms message (group consumption may keep timers of its own)
    assert page.locator("#timers-table tr", has_text="Pending").locator("td").nth(1).inner_text() == str(pending)
    clean(page, watched, "delayed")


def test_files_page_lists_the_store_files(context: Any, broker: BrokerProcess | InProcessBroker) -> None:
    page, watched = open_console(context, broker, "files")
    listing = httpx.get(f"{broker.url}/v1/store/files").json()
    commitlog = next(f for f in listing["files"] if f["kind"] == "commitlog")
    assert page.locator("#files-table tr", has_text=commitlog["path"]).count() == 1
    assert page.locator("#kinds-table tr", has_text="consumequeue").count() == 1
    clean(page, watched, "files")


def test_swagger_ui_is_served_locally(context: Any, broker: BrokerProcess | InProcessBroker) -> None:
    page = context.new_page()
    watched = watch(page, broker.url)
    page.goto("/docs")
    page.wait_for_selector(".swagger-ui .info .title")
    assert "tidemq" in page.inner_text(".swagger-ui .info .title")
    page.get_by_text("/v1/store/files", exact=True).wait_for()
    clean(page, watched, "swagger-ui")
