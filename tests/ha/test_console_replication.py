"""The console's overview on a real master/slave pair: both show the replication state and lag."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.app.browser import browser_context, require_chromium, screenshot, watch
from tests.ha.cluster import Node
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


def test_overview_shows_replication_on_master_and_slave(cluster: Callable[..., Node]) -> None:
    require_chromium()
    master = cluster("master", "master")
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    assert master.client.put("/v1/topics/repl", json={"queues": 1}).status_code == 201
    assert master.client.put("/v1/topics/repl", json={"queues": 4}).status_code in (200, 201)
    assert master.client.post("/v1/topics/repl/messages", json={"body": "copied"}).status_code == 201
    end = master.client.get("/v1/store").json()["runtime"]["commitlog_max_offset"]
    wait_for(lambda: slave.client.get("/v1/store").json()["runtime"]["commitlog_max_offset"] == end, what="the slave to catch up")
    wait_for(lambda: master.client.get("/v1/store").json()["ha"].get("bytes_behind") == 0, what="the master to see the slave's ack")
    for node, name in ((master, "master"), (slave, "slave")):
        for context in browser_context(node.url):
            page = context.new_page()
            watched = watch(page, node.url)
            page.goto("/console#/")
            page.wait_for_selector('body[data-route=""]')
            card = page.locator("#card-replication")
            # The master names its slave's link "connected", the slave its own "streaming".
            card.filter(has_text="0 B behind (connected)" if name == "master" else "0 B behind (streaming)").wait_for()
            role = page.locator("#card-role .value").inner_text()
            assert role.startswith("ASYNC_MASTER" if name == "master" else "SLAVE"), role
            screenshot(page, f"overview-{name}")
            page.close()
            assert watched.errors == [] and watched.foreign == [], watched
