"""Input the broker used to accept silently: repeated JSON names, control characters in a tag filter,
invalid UTF-8 and repeated names in query strings. Each is a 400 problem with nothing stored, the
same through the hot routes and through FastAPI's."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.strict_json import colons_are, duplicate_name
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker
from tests.app.helpers import commitlog_max, problem
from tests.app.in_process import InProcessBroker

pytestmark = pytest.mark.timeout(120)
RAW = {"content-type": "application/octet-stream"}
JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    "text",
    [
        b'{"body":"a","body":"b"}',
        b'{"body" :"a",  "body":"b"}',  # space before a colon
        b'{"body":"x:y","tags":"a","tags":"b"}',  # a colon inside a string
        b'{"body":"say \\"hi\\"","b\\u006fdy":"b"}',  # an escaped name
        b'{"messages":[{"body":"a"},{"body":"b","properties":{"p":"1","p":"2"}}]}',
        b'{"body":"a","properties":{"k":"v"},"properties":{"k":"v"}}',
    ],
)
def test_repeated_names_are_found(text: bytes) -> None:
    assert duplicate_name(text, orjson.loads(text)) is not None


@pytest.mark.parametrize(
    "text",
    [
        b'{"body":"a","tags":"b"}',
        b'{"body":"12:30 http://x","tags":"b"}',
        b'{"body":"a\\"b\\\\","tags":"\\u00e9"}',
        b'{"messages":[{"body":"a"},{"body":"a","properties":{"body":"1"}}]}',
        b'{ "body" : "a" , "keys" : [ "k" ] }',
    ],
)
def test_distinct_names_pass(text: bytes) -> None:
    assert duplicate_name(text, orjson.loads(text)) is None


@settings(max_examples=300)
@given(st.binary(max_size=40).map(lambda b: b.replace(b"a", b":")), st.integers(min_value=0, max_value=12))
def test_colons_are_counts_as_count_does(data: bytes, expected: int) -> None:
    assert colons_are(data, expected) is (data.count(b":") == expected)


@pytest.fixture(params=[True, False], ids=["hot-routes", "fastapi-routes"])
def broker(request: pytest.FixtureRequest, make_broker: MakeBroker) -> BrokerProcess | InProcessBroker:
    config = SMALL_STORE + SMALL_BROKER + f"hot_routes = {'true' if request.param else 'false'}\n"
    started = make_broker(config)
    assert started.client is not None
    assert started.client.put("/v1/topics/strict", json={"queues": 2}).status_code == 201
    return started


@pytest.mark.parametrize(
    ("method", "path", "headers", "content", "code"),
    [
        ("POST", "/v1/topics/strict/messages", JSON, b'{"body":"a","body":"b"}', "BODY_INVALID"),
        ("POST", "/v1/topics/strict/messages", JSON, b'{"messages":[{"body":"a","queue_id":0,"queue_id":1}]}', "BODY_INVALID"),
        ("POST", "/v1/topics/strict/messages?tags=%01", RAW, b"x", "TAG_INVALID"),
        ("POST", "/v1/topics/strict/messages", JSON, b'{"body":"a","tags":"a\\nb"}', "TAG_INVALID"),
        ("POST", "/v1/topics/strict/messages?keys=%ff%fe", RAW, b"x", "REQUEST_INVALID"),
        ("POST", "/v1/topics/strict/messages?tags=caf%e9", RAW, b"x", "REQUEST_INVALID"),
        ("POST", "/v1/topics/strict/messages?queue_id=0&queue_id=1", RAW, b"x", "REQUEST_INVALID"),
        ("GET", "/v1/topics/strict/queues/0/messages?offset=0&tag=%01", {}, b"", "TAG_INVALID"),
        ("GET", "/v1/topics/strict/queues/0/messages?offset=0&offset=1", {}, b"", "REQUEST_INVALID"),
        ("GET", "/v1/topics/strict/queues/0/messages?offset=0&group=g%ff", {}, b"", "REQUEST_INVALID"),
        ("PUT", "/v1/topics/other", JSON, b'{"queues":2,"queues":3}', "BODY_INVALID"),
    ],
)
def test_bad_input_is_400_and_nothing_is_stored(
    broker: BrokerProcess | InProcessBroker, method: str, path: str, headers: dict[str, str], content: bytes, code: str
) -> None:
    c = broker.client
    assert c is not None
    before = commitlog_max(c)
    problem(c.request(method, path, headers=headers, content=content), 400, code)
    assert commitlog_max(c) == before
    assert c.get("/v1/topics/other").status_code == 404
