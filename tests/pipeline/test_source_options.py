"""Every option of the tidemq source and sink, good and bad forms, checked without a SparkSession."""

from __future__ import annotations

import pytest

from pipeline.errors import DataLost, OptionInvalid
from pipeline.http_client import check_url
from pipeline.offsets import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    QueueRange,
    allot_rows,
    from_json_offsets,
    parse_offset_spec,
    resolve_ranges,
    to_json_offsets,
)

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.types import ArrayType, BinaryType, DataType, DoubleType, IntegerType, MapType, StringType, StructField, StructType

from pipeline.errors import RowInvalid
from pipeline.tidemq_sink import message_of, sink_settings
from pipeline.tidemq_source import TidemqBatchReader, TidemqStreamReader, read_settings

URL = "http://127.0.0.1:8080"
TYPES: dict[str, DataType] = {
    "string": StringType(),
    "binary": BinaryType(),
    "int": IntegerType(),
    "double": DoubleType(),
    "array<string>": ArrayType(StringType()),
    "array<int>": ArrayType(IntegerType()),
    "map<string,string>": MapType(StringType(), StringType()),
    "map<string,int>": MapType(StringType(), IntegerType()),
}


def ddl(text: str) -> StructType:
    """A schema from "name type, ..." (StructType.fromDDL needs a running JVM)."""
    return StructType([StructField(name, TYPES[kind]) for name, kind in (f.strip().split(" ") for f in text.split(", "))])


QUEUES = {0: QueueRange(0, 30), 1: QueueRange(5, 10), 2: QueueRange(0, 0)}


# Offsets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "default", "want_default", "want_per_queue"),
    [
        (None, EARLIEST, EARLIEST, {}),
        ("earliest", LATEST, EARLIEST, {}),
        (" LATEST ", EARLIEST, LATEST, {}),
        ('{"0": 12, "2": -1, "1": -2}', EARLIEST, EARLIEST, {0: 12, 2: LATEST, 1: EARLIEST}),
    ],
)
def test_offset_specs_parse(text: str | None, default: int, want_default: int, want_per_queue: dict[int, int]) -> None:
    spec = parse_offset_spec("startingOffsets", text, default)
    assert (spec.default, spec.per_queue) == (want_default, want_per_queue)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("first", "must be earliest, latest or a JSON object"),
        ("", "must be earliest, latest or a JSON object"),
        ("[1]", "a JSON offset must be a non-empty object"),
        ("{}", "a JSON offset must be a non-empty object"),
        ('{"0": "x"}', "offset of queue 0 must be an integer"),
        ('{"0": 1.5}', "offset of queue 0 must be an integer"),
        ('{"0": true}', "offset of queue 0 must be an integer"),
        ('{"0": -3}', "offset of queue 0 must be an integer >= 0, or -2 (earliest) or -1 (latest)"),
        ('{"a": 1}', "queue id 'a' is not a non-negative integer"),
        ('{"-1": 1}', "queue id '-1' is not a non-negative integer"),
    ],
)
def test_bad_offset_specs_name_the_option(text: str, message: str) -> None:
    with pytest.raises(OptionInvalid) as exc:
        parse_offset_spec("startingOffsets", text, EARLIEST)
    assert str(exc.value).startswith("option startingOffsets: ") and message in str(exc.value)


def spec(option: str, text: str | None) -> OffsetSpec:
    return parse_offset_spec(option, text, EARLIEST if option == "startingOffsets" else LATEST)


def test_ranges_resolve_defaults_per_queue() -> None:
    ranges = resolve_ranges("t", QUEUES, spec("startingOffsets", '{"0": 4}'), spec("endingOffsets", '{"1": 7}'))
    assert ranges == {0: (4, 30), 1: (5, 7), 2: (0, 0)}
    assert resolve_ranges("t", QUEUES, spec("startingOffsets", "latest"), spec("endingOffsets", None)) == {
        0: (30, 30),
        1: (10, 10),
        2: (0, 0),
    }


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ('{"9": 0}', None, "option startingOffsets: queue(s) [9] are not queues of topic 't' (queues [0, 1, 2])"),
        (None, '{"3": 0}', "option endingOffsets: queue(s) [3] are not queues"),
        ('{"0": 31}', None, "option startingOffsets: offset 31 of queue 0 is past the queue's max offset 30"),
        (None, '{"0": 999}', "option endingOffsets: offset 999 of queue 0 is past the queue's max offset 30"),
        ('{"0": 9}', '{"0": 4}', "option endingOffsets: offset 4 of queue 0 is before the starting offset 9"),
        (None, '{"1": 2}', "option endingOffsets: offset 2 of queue 1 is before the starting offset 5"),
    ],
)
def test_impossible_ranges_are_refused(start: str | None, end: str | None, message: str) -> None:
    with pytest.raises(OptionInvalid) as exc:
        resolve_ranges("t", QUEUES, spec("startingOffsets", start), spec("endingOffsets", end))
    assert message in str(exc.value)


def test_a_start_below_the_queue_min_is_data_loss_unless_allowed() -> None:
    with pytest.raises(DataLost) as exc:
        resolve_ranges("t", QUEUES, spec("startingOffsets", '{"1": 2}'), spec("endingOffsets", None))
    assert "offsets 2..4 are no longer stored" in str(exc.value) and "failOnDataLoss=false" in str(exc.value)
    ranges = resolve_ranges("t", QUEUES, spec("startingOffsets", '{"1": 2}'), spec("endingOffsets", None), fail_on_data_loss=False)
    assert ranges[1] == (5, 10)


def test_stream_offsets_round_trip_through_json_and_bad_checkpoints_are_clear() -> None:
    assert from_json_offsets(to_json_offsets({2: 5, 0: 1})) == {0: 1, 2: 5}
    assert to_json_offsets({2: 5, 0: 1}) == {"0": 1, "2": 5}
    with pytest.raises(OptionInvalid):
        from_json_offsets({"zero": 1})


@pytest.mark.parametrize(
    ("start", "available", "max_rows", "want"),
    [
        ({0: 0, 1: 0}, {0: 10, 1: 10}, 100, {0: 10, 1: 10}),
        ({0: 0, 1: 0}, {0: 10, 1: 10}, 7, {0: 3, 1: 4}),
        ({0: 0, 1: 0, 2: 0}, {0: 1, 1: 50, 2: 50}, 21, {0: 1, 1: 10, 2: 10}),
        ({0: 5, 1: 0}, {0: 5, 1: 3, 2: 4}, 2, {0: 5, 1: 1, 2: 1}),
        ({0: 0, 1: 0, 2: 0}, {0: 9, 1: 9, 2: 9}, 1, {0: 0, 1: 0, 2: 1}),
    ],
)
def test_rows_are_allotted_fairly_within_the_limit(
    start: dict[int, int], available: dict[int, int], max_rows: int, want: dict[int, int]
) -> None:
    got = allot_rows(start, available, max_rows)
    assert got == want
    assert sum(got[q] - start.get(q, 0) for q in got) == min(max_rows, sum(available[q] - start.get(q, 0) for q in available))


# Source options --------------------------------------------------------------------------------


def test_read_settings_defaults() -> None:
    s = read_settings({"url": URL + "/", "topic": "orders", "tag": "*"})
    assert (s.client.url, s.topic, s.tag, s.pull_messages, s.fail_on_data_loss) == (URL, "orders", None, 1024, True)
    s = read_settings({"URL": URL, "Topic": "orders", "tag": "TagA||TagB", "pullmessages": "8", "FAILONDATALOSS": "no"})
    assert (s.tag, s.pull_messages, s.fail_on_data_loss) == ("TagA||TagB", 8, False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": None}, "option url: is required"),
        ({"url": ""}, "option url: is required"),
        ({"url": "ftp://x"}, "option url: must be an http:// URL"),
        ({"url": "localhost:8080"}, "option url: must be an http:// URL"),
        ({"topic": None}, "option topic: is required"),
        ({"topic": " "}, "option topic: is required"),
        ({"pullMessages": "lots"}, "option pullMessages: must be an integer"),
        ({"pullMessages": "0"}, "option pullMessages: must be in 1..100000"),
        ({"failOnDataLoss": "perhaps"}, "option failOnDataLoss: must be true or false"),
        ({"startingOffsets": "first"}, "option startingOffsets: must be earliest"),
        ({"endingOffsets": "[]"}, "option endingOffsets: a JSON offset must be a non-empty object"),
        ({"maxMessagesPerPartition": "0"}, "option maxMessagesPerPartition: must be >= 1"),
        ({"maxMessagesPerPartition": "1e3"}, "option maxMessagesPerPartition: must be an integer"),
    ],
)
def test_bad_batch_options_name_the_option(options: dict[str, str | None], message: str) -> None:
    merged = {k: v for k, v in {"url": URL, "topic": "orders", **options}.items() if v is not None}
    with pytest.raises(OptionInvalid) as exc:
        TidemqBatchReader(merged)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endingOffsets": "latest"}, "option endingOffsets: is for batch reads"),
        ({"maxMessagesPerTrigger": "0"}, "option maxMessagesPerTrigger: must be >= 1"),
        ({"startingOffsets": '{"x": 1}'}, "option startingOffsets: queue id 'x'"),
    ],
)
def test_bad_stream_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionInvalid) as exc:
        TidemqStreamReader({"url": URL, "topic": "orders", **options})
    assert message in str(exc.value)


def test_bad_urls() -> None:
    assert check_url(" https://h:1/ ") == "https://h:1"
    for bad in (None, "", "http://", "mailto:x@y"):
        with pytest.raises(OptionInvalid):
            check_url(bad)


# Sink options and rows -------------------------------------------------------------------------

FULL = (
    "body binary, keys array<string>, tags string, properties map<string,string>, queue_id int, sharding_key string, "
    "msg_id string, topic string, extra double"
)


def test_sink_settings_pick_the_message_columns_and_ignore_others() -> None:
    s = sink_settings({"url": URL, "topic": "t"}, ddl(FULL))
    assert s.columns == ("body", "keys", "tags", "properties", "queue_id", "sharding_key", "msg_id", "topic")
    assert (s.topic, s.batch_messages, s.max_batch_bytes) == ("t", 500, 8 * 1024 * 1024)
    assert sink_settings({"url": URL}, ddl("body string, topic string")).topic is None


@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        ("value string", {}, "the sink needs a body column"),
        ("body int", {}, "column body must be binary or string, not int"),
        ("body string, keys array<int>", {}, "column keys must be array<string> or string"),
        ("body string, keys int", {}, "column keys must be array or string"),
        ("body string, properties map<string,int>", {}, "column properties must be map<string,string>"),
        ("body string, properties string", {}, "column properties must be map"),
        ("body string, queue_id string", {}, "column queue_id must be integer or long or short"),
        ("body string, tags int", {}, "column tags must be string"),
        ("body string", {"topic": ""}, "option topic: is required unless the input has a topic column"),
        ("body string", {"batchMessages": "1001"}, "option batchMessages: must be in 1..1000"),
        ("body string", {"batchMessages": "0"}, "option batchMessages: must be in 1..1000"),
        ("body string", {"maxBatchBytes": "0"}, "option maxBatchBytes: must be >= 1"),
        ("body string", {"url": "nope"}, "option url: must be an http:// URL"),
    ],
)
def test_bad_sink_input_names_the_problem(columns: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionInvalid) as exc:
        sink_settings({"url": URL, "topic": "t", **options}, ddl(columns))
    assert message in str(exc.value)


def test_rows_become_produce_messages() -> None:
    columns = ("body", "keys", "tags", "properties", "queue_id", "sharding_key", "msg_id", "topic")
    row = {"body": bytearray(b"\x00\xff"), "keys": ["a", "b"], "tags": "T", "properties": {"p": "v"}, "queue_id": 2,
           "sharding_key": None, "msg_id": "M1", "topic": "other"}  # fmt: skip
    topic, msg, size = message_of(row, columns)
    assert topic == "other"
    assert msg == {
        "body": "AP8=",
        "encoding": "base64",
        "keys": ["a", "b"],
        "tags": "T",
        "properties": {"p": "v"},
        "queue_id": 2,
        "msg_id": "M1",
    }
    assert size == 4
    assert message_of({"body": "héllo", "keys": "k1  k2"}, ("body", "keys"))[1] == {
        "body": "héllo",
        "encoding": "utf-8",
        "keys": ["k1", "k2"],
    }
    with pytest.raises(RowInvalid):
        message_of({"body": None}, ("body",))
