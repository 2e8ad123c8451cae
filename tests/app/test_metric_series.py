"""/metrics: per-topic and per-group series within their bounds, and the process's figures."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker
from tests.app.scrape import samples, value
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


def wait_counted(c: httpx.Client, topic: str, count: int) -> None:
    """Until /metrics counts `count` dispatched messages of `topic` (10 s at most)."""
    wait_for(
        lambda: value(samples(c.get("/metrics").text), "tidemq_topic_messages_total", topic=topic) >= count,
        10,
        what=f"the {count} messages of {topic} to be dispatched",
    )


def test_per_topic_series_are_bounded_by_metrics_max_topics(make_broker: MakeBroker) -> None:
    c = make_broker(SMALL_STORE + SMALL_BROKER + "metrics_max_topics = 2\n").client
    assert c is not None
    names = ["a-topic", "b-topic", "c-topic"]
    for name in names:
        assert c.put(f"/v1/topics/{name}", json={"queues": 2}).status_code == 201
    for i in range(3):
        assert c.post("/v1/topics/a-topic/messages", json={"body": f"m{i}", "queue_id": i % 2}).status_code == 201
    wait_counted(c, "a-topic", 3)
    pulled = c.get("/v1/topics/a-topic/queues/0/messages", params={"offset": 0}).json()
    scrape = samples(c.get("/metrics").text)
    exported = {labels["topic"] for labels, _ in scrape["tidemq_topic_messages_total"]}
    assert exported == {"a-topic", "b-topic"}  # the first two by name
    assert value(scrape, "tidemq_metrics_topics_omitted") == 1
    assert value(scrape, "tidemq_topic_messages_total", topic="a-topic") == 3
    assert value(scrape, "tidemq_topic_retained_messages", topic="a-topic") == 3
    assert value(scrape, "tidemq_topic_pulled_messages_total", topic="a-topic") == len(pulled["messages"]) == 2
    assert value(scrape, "tidemq_topic_queues", topic="b-topic") == 2
    assert value(scrape, "tidemq_topic_messages_total", topic="b-topic") == 0
    assert c.delete("/v1/topics/a-topic").status_code == 204
    scrape = samples(c.get("/metrics").text)
    assert {labels["topic"] for labels, _ in scrape["tidemq_topic_messages_total"]} == {"b-topic", "c-topic"}
    assert value(scrape, "tidemq_metrics_topics_omitted") == 0


def proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="process metrics read /proc, which this system lacks")
def test_process_metrics_describe_the_broker_process(make_broker: MakeBroker) -> None:
    broker = make_broker(process=True)  # the metrics describe the process
    assert isinstance(broker, BrokerProcess) and broker.client is not None and broker.proc is not None
    scrape = samples(broker.client.get("/metrics").text)
    pid = broker.proc.pid
    open_fds = value(scrape, "tidemq_process_open_fds")
    # Descriptors and threads come and go (connections, pool threads): compared loosely with what /proc says now.
    assert abs(open_fds - len(os.listdir(f"/proc/{pid}/fd"))) <= 16
    assert 0 < open_fds < value(scrape, "tidemq_process_max_fds")
    assert abs(value(scrape, "tidemq_process_threads") - proc_status(pid, "Threads")) <= 8
    rss = value(scrape, "tidemq_process_resident_memory_bytes")
    assert 0.5 < rss / (proc_status(pid, "VmRSS") * 1024) < 2
    assert value(scrape, "tidemq_process_virtual_memory_bytes") >= rss
    assert value(scrape, "tidemq_process_cpu_seconds_total") > 0
    started = value(scrape, "tidemq_process_start_time_seconds")
    assert time.time() - 600 < started <= time.time() + 5
    # The process's start-up heap (modules, the app, the store's tables) is frozen out of the collector once the
    # store runs (ready: it has), and collections go on for what is made after.
    assert value(scrape, "tidemq_gc_frozen_objects") > 20_000
    assert value(scrape, "tidemq_gc_collections_total", generation="0") > 0


def test_an_in_process_broker_leaves_its_host_process_heap_alone(make_broker: MakeBroker) -> None:
    import gc

    frozen = gc.get_freeze_count()
    broker = make_broker()  # served from this process: the heap is the test process's, not the broker's to freeze
    assert broker.client is not None
    assert broker.client.get("/readyz").status_code == 200
    assert gc.get_freeze_count() == frozen


def test_per_group_series_cover_offset_committing_groups_within_metrics_max_groups(make_broker: MakeBroker) -> None:
    c = make_broker(SMALL_STORE + SMALL_BROKER + "metrics_max_groups = 2\n").client
    assert c is not None
    assert c.put("/v1/topics/orders", json={"queues": 2}).status_code == 201
    for i in range(5):
        assert c.post("/v1/topics/orders/messages", json={"body": f"m{i}", "queue_id": i % 2}).status_code == 201
    wait_counted(c, "orders", 5)
    for group, offsets in (("a-billing", (2, 1)), ("b-audit", (0, 0)), ("c-late", (1, 0))):
        commits = [{"topic": "orders", "queue_id": q, "offset": o} for q, o in enumerate(offsets)]
        assert c.put(f"/v1/groups/{group}/offsets", json=commits).status_code == 200
    scrape = samples(c.get("/metrics").text)
    assert {labels["group"] for labels, _ in scrape["tidemq_group_lag"]} == {"a-billing", "b-audit"}  # the first two by name
    assert value(scrape, "tidemq_metrics_groups_omitted") == 1
    assert value(scrape, "tidemq_group_committed_offset", group="a-billing", topic="orders") == 3
    assert value(scrape, "tidemq_group_lag", group="a-billing", topic="orders") == 2
    assert value(scrape, "tidemq_group_lag", group="b-audit", topic="orders") == 5
    assert value(scrape, "tidemq_group_received_total", group="a-billing", topic="orders") == 0  # it pulls, never receives
