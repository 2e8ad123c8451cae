"""The HTTP read path without Spark: the broker client and one partition's read loop, against a live server."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict, Unpack

import pytest

from pipeline.errors import BrokerProblem, BrokerUnavailable
from pipeline.http_client import BrokerClient, ClientSettings
from tests.loopback import free_port
from tests.pipeline.pipeline_helpers import Server, create_topic, produce, start_server, stop_server

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pipeline.queue_reader import QueueRangePartition, ReadSettings, read_partition, split_range

pytestmark = pytest.mark.timeout(120)

TOPIC = "reads"
MAX_PULL = 8  # the server's max_pull_messages: pulls asking more are refused with MAX_INVALID


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("reader"), broker_lines=(f"max_pull_messages = {MAX_PULL}",))
    try:
        create_topic(s.url, TOPIC, 2)
        messages = [{"body": f"m{i}", "tags": "A" if i % 3 == 0 else "B", "queue_id": i % 2, "keys": [f"k{i}"]} for i in range(60)]
        produce(s.url, TOPIC, messages)
        yield s
    finally:
        stop_server(s)


class ReadOptions(TypedDict, total=False):
    """ReadSettings' fields past the client and topic, as a test names them."""

    tag: str | None
    pull_messages: int
    fail_on_data_loss: bool
    prefetch_pulls: int


def rows(server: Server, part: QueueRangePartition, **settings: Unpack[ReadOptions]) -> list[dict[str, Any]]:
    read = ReadSettings(ClientSettings(server.url), TOPIC, **settings)
    return [row for batch in read_partition(read, part) for row in batch.to_pylist()]


def test_reads_exactly_the_range_in_order_halving_pulls_the_broker_refuses(server: Server) -> None:
    got = rows(server, QueueRangePartition(0, 3, 25), pull_messages=100)  # 100 > MAX_PULL: halved until accepted
    assert [r["queue_offset"] for r in got] == list(range(3, 25))
    assert [r["body"] for r in got] == [f"m{2 * o}".encode() for o in range(3, 25)]
    assert got[0]["keys"] == ["k6"] and got[0]["tags"] == "A" and got[0]["topic"] == TOPIC and got[0]["queue_id"] == 0


def test_a_tag_filter_never_returns_matches_past_the_end(server: Server) -> None:
    got = rows(server, QueueRangePartition(1, 0, 10), tag="A", pull_messages=4)
    # queue 1 holds messages 1, 3, 5, ...; tag A is on multiples of 3: offsets 1 (m3), 4 (m9), 7 (m15)
    assert [(r["queue_offset"], r["body"]) for r in got] == [(1, b"m3"), (4, b"m9"), (7, b"m15")]
    assert rows(server, QueueRangePartition(1, 2, 4), tag="A") == []


def test_an_empty_or_stand_in_partition_reads_nothing(server: Server) -> None:
    from pyspark.sql.datasource import InputPartition

    assert rows(server, QueueRangePartition(0, 5, 5)) == []
    assert list(read_partition(ReadSettings(ClientSettings(server.url), TOPIC), InputPartition(None))) == []


def test_split_range_cuts_large_ranges() -> None:
    parts = split_range(3, 10, 35, 10, tolerate_gap=True)
    assert [(p.queue_id, p.start, p.end, p.tolerate_gap) for p in parts] == [(3, 10, 20, True), (3, 20, 30, False), (3, 30, 35, False)]
    assert split_range(0, 5, 5, 10) == []


def test_client_topic_metadata_and_problems(server: Server) -> None:
    with BrokerClient(ClientSettings(server.url)) as client:
        meta = client.topic(TOPIC)
        assert (meta.read_queues, meta.queues[0].max_offset, meta.queues[1].max_offset) == (2, 30, 30)
        with pytest.raises(BrokerProblem) as exc:
            client.topic("missing")
        assert (exc.value.status, exc.value.code) == (404, "TOPIC_NOT_FOUND")
        with pytest.raises(BrokerProblem) as exc:
            client.produce(TOPIC, [{"body": "x", "tags": "A||B"}])
        assert exc.value.code == "TAG_INVALID" and "TAG_INVALID" in str(exc.value)
        with pytest.raises(BrokerProblem) as exc:
            client.pull(TOPIC, 7, 0, 1)
        assert exc.value.code == "QUEUE_NOT_FOUND"
        sent = client.produce(TOPIC, [{"body": base64.b64encode(b"\x00").decode(), "encoding": "base64", "queue_id": 1}])
        assert sent[0]["queue_id"] == 1 and sent[0]["queue_offset"] == 30


def test_an_unreachable_broker_is_retried_then_reported(tmp_path: Path) -> None:
    settings = ClientSettings(f"http://127.0.0.1:{free_port()}", max_retries=2, retry_backoff_ms=1)
    with BrokerClient(settings) as client, pytest.raises(BrokerUnavailable) as exc:
        client.topic(TOPIC)
    assert "failed after 3 attempts" in str(exc.value)
