"""Group consumption as Server-Sent Events: events, max_in_flight, acks freeing room, heartbeats, clean end."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, running_broker
from tests.app.helpers import problem, send

pytestmark = pytest.mark.timeout(60)
STREAM_BROKER = SMALL_BROKER + "stream_heartbeat_ms = 300\n"


@pytest.fixture(scope="module")
def sse_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory, "sse", SMALL_STORE + STREAM_BROKER)


def events(lines: Iterator[str], n: int) -> tuple[list[dict], list[str]]:
    """The next `n` message events (and the comment lines seen meanwhile)."""
    got: list[dict] = []
    comments: list[str] = []
    kind = None
    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith(":"):
            comments.append(line)
        elif line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            assert kind == "message"
            got.append(json.loads(line[len("data: ") :]))
            if len(got) == n:
                return got, comments
    return got, comments


def test_stream_holds_max_in_flight_and_an_ack_lets_the_next_one_through(sse_broker: BrokerProcess, topic: str) -> None:
    c = sse_broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    for i in range(3):
        send(c, topic, f"e{i}")
    url = f"/v1/groups/sse-g/topics/{topic}/stream"
    with (
        httpx.Client(base_url=sse_broker.url, timeout=10) as own,
        own.stream("GET", url, params={"max_in_flight": 2}, headers={"accept": "text/event-stream"}) as r,
    ):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()
        first, _ = events(lines, 2)
        assert [m["body"] for m in first] == ["e0", "e1"] and all(m["receipt_handle"] for m in first)
        beats = []
        for line in lines:  # no third message while two are unacked; heartbeats keep coming
            beats.append(line)
            if len([b for b in beats if b.startswith(": heartbeat")]) >= 2:
                break
        assert not any(b.startswith("data: ") for b in beats)
        acked = c.post(f"/v1/groups/sse-g/topics/{topic}/ack", json={"receipt_handles": [first[0]["receipt_handle"]]})
        assert acked.json()["results"][0]["status"] == "OK"
        third, _ = events(lines, 1)
        assert [m["body"] for m in third] == ["e2"] and third[0]["reconsume_times"] == 0


def test_a_produce_reaches_an_open_stream_and_curl_reads_it(sse_broker: BrokerProcess, topic: str) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    c = sse_broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 2}).status_code == 201
    proc = subprocess.Popen(
        [curl, "-sN", "-H", "accept: text/event-stream", f"{sse_broker.url}/v1/groups/curl-g/topics/{topic}/stream"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        threading.Timer(0.5, lambda: send(c, topic, "to-curl", queue_id=1)).start()
        assert proc.stdout is not None
        got, comments = events(iter(proc.stdout.readline, ""), 1)
        assert [m["body"] for m in got] == ["to-curl"] and comments[0] == ": stream open"
    finally:
        proc.kill()
        proc.wait()


def test_bad_stream_parameters_are_refused(sse_broker: BrokerProcess, topic: str) -> None:
    c = sse_broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    url = f"/v1/groups/g/topics/{topic}/stream"
    assert problem(c.get(url, params={"max_in_flight": 0}), 400, "MAX_INVALID")
    assert problem(c.get(url, params={"max_in_flight": 1025}), 400, "MAX_INVALID")
    assert problem(c.get(url, params={"invisible_ms": 5}), 400, "INVISIBLE_TIME_INVALID")
    assert problem(c.get(url, params={"nope": 1}), 400, "REQUEST_INVALID")
    assert problem(c.get(f"/v1/groups/g/topics/none-{topic}/stream"), 404, "TOPIC_NOT_FOUND")


def test_a_stream_ends_cleanly_when_the_broker_stops(make_broker, topic: str) -> None:
    broker = make_broker(SMALL_STORE + STREAM_BROKER, process=True)  # SIGTERM and its exit status
    c = broker.client
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    ended = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with httpx.Client(base_url=broker.url, timeout=20) as own, own.stream("GET", f"/v1/groups/g/topics/{topic}/stream") as r:
                for _ in r.iter_lines():
                    pass
            ended.set()  # the chunked body was closed properly: no protocol error
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.5)
    assert broker.stop(signal.SIGTERM) == 0
    reader.join(20)
    assert errors == [] and ended.is_set()
