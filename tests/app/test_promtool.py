"""A real scrape passes `promtool check metrics` (Debian's prometheus package) without a complaint."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import pytest

from tests.app.conftest import MakeBroker
from tests.app.scrape import serve_hot_routes
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


def test_a_scrape_after_every_hot_route_passes_promtool(make_broker: MakeBroker) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    client = make_broker().client
    assert client is not None
    serve_hot_routes(client, "t-" + uuid.uuid4().hex[:8], "g-" + uuid.uuid4().hex[:8])
    assert client.get("/no/such/path").status_code == 404  # a problem code and the `other` route
    # A timer message an hour away, so the series only a pending timer has are checked too.
    later = {"body": "later", "deliver_at_ms": int(time.time() * 1000) + 3_600_000}
    assert client.put("/v1/topics/timers", json={"queues": 1}).status_code in (200, 201)
    assert client.post("/v1/topics/timers/messages", json=later).status_code == 201
    text = wait_for(
        lambda: page if "tidemq_timer_next_due_timestamp_seconds " in (page := client.get("/metrics").text) else None,
        10,
        what="the timer message to be enqueued",
    )
    assert text is not None
    for family in ("tidemq_http_requests_total", "tidemq_topic_messages_total", "tidemq_process_open_fds", "tidemq_group_lag"):
        assert f"# TYPE {family} " in text, family
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr
