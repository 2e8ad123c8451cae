"""The console's Push page and the group page's redrive in headless Chromium against a real broker
and a receiver on loopback: a subscription made in the form delivers, its counts show, it stops;
the redrive button moves dead letters back and shows the progress. Screenshots land in
tests/artifacts/console/."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.app.browser import browser_context, require_chromium, screenshot
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, running_broker
from tests.app.in_process import InProcessBroker
from tests.app.push_receiver import PushReceiver
from tests.app.test_console import clean, open_console
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
CONFIG = (
    SMALL_STORE
    + "pop_ack_margin_ms = 100\npop_revive_interval_ms = 20\n"
    + SMALL_BROKER
    + 'push_allowed_hosts = ["127.0.0.1"]\npush_idle_poll_ms = 50\n'
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | InProcessBroker]:
    require_chromium()
    yield from running_broker(tmp_path_factory, "console-push", CONFIG)


@pytest.fixture(scope="module")
def context(broker: BrokerProcess | InProcessBroker) -> Iterator[Any]:
    yield from browser_context(broker.url)


@pytest.fixture
def c(broker: BrokerProcess | InProcessBroker) -> httpx.Client:
    assert broker.client is not None
    return broker.client


def test_a_subscription_made_on_the_push_page_delivers_shows_its_counts_and_stops(
    context: Any, broker: BrokerProcess | InProcessBroker, c: httpx.Client
) -> None:
    assert c.put("/v1/topics/hooks", json={"queues": 1}).status_code == 201
    with PushReceiver() as receiver:
        page, watched = open_console(context, broker, "push")
        assert page.locator("#push-empty").is_visible()
        form = page.locator("#create-push")
        form.locator("input[name=group]").fill("hook-group")
        form.locator("input[name=topic]").fill("hooks")
        form.locator("input[name=url]").fill(receiver.url)
        form.locator("input[name=secret]").fill("console-secret-0123456789")
        form.locator("button[type=submit]").click()
        page.wait_for_selector("text=Push subscription hook-group saved")
        assert c.get("/v1/groups/hook-group/push").json()["url"] == receiver.url
        for i in range(3):
            assert c.post("/v1/topics/hooks/messages", json={"body": f"hello {i}"}).status_code == 201
        receiver.wait_for(lambda got: len({d.body for d in got if d.status == 200}) == 3)
        row = page.locator("#push-table tr", has_text="hook-group")
        # The table is drawn again every 2 s: it comes to show the three deliveries.
        deadline = time.monotonic() + 20
        while row.locator("td").nth(4).inner_text() != "3":
            assert time.monotonic() < deadline, row.inner_text()
            page.wait_for_timeout(200)
        assert row.locator("td").nth(3).inner_text() == "delivering"
        assert "console-secret" not in page.content()  # the secret is never shown
        screenshot(page, "push")
        row.locator("button", has_text="Stop").click()
        row.locator("button", has_text="Yes, stop").click()
        page.wait_for_selector("#push-empty")
        assert c.get("/v1/groups/hook-group/push").status_code == 404
        clean(page, watched, "push-stopped")


def test_the_redrive_button_moves_dead_letters_back(
    context: Any,
    broker: BrokerProcess | InProcessBroker,
    c: httpx.Client,
) -> None:
    assert c.put("/v1/topics/dead", json={"queues": 1}).status_code == 201
    assert c.put("/v1/groups/mourner", json={"max_reconsume_times": 0}).status_code == 201
    for i in range(2):
        assert c.post("/v1/topics/dead/messages", json={"body": f"lost {i}"}).status_code == 201
    taken: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while len(taken) < 2:
        assert time.monotonic() < deadline
        taken += c.post("/v1/groups/mourner/topics/dead/receive", params={"invisible_ms": 1000, "wait_ms": 500}).json()["messages"]

    def dead_lettered() -> bool:
        r = c.get("/v1/topics/%DLQ%mourner")
        return r.status_code == 200 and r.json()["queues"][0]["max_offset"] >= 2

    wait_for(dead_lettered, 20, what="both messages in the dead-letter topic", poll_s=0.05)
    page, watched = open_console(context, broker, "groups/mourner")
    page.locator("button", has_text="Redrive dead letters").click()
    page.locator("button", has_text="Yes, redrive dead letters").click()
    page.wait_for_selector(".redrive-status >> text=moved 2 of 2")
    assert "done" in page.locator(".redrive-status").inner_text()
    got = c.post("/v1/groups/mourner/topics/dead/receive", params={"wait_ms": 2000}).json()["messages"]
    assert sorted(m["body"] for m in got) == ["lost 0", "lost 1"]
    clean(page, watched, "group-redrive")
