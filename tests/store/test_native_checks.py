"""The native kernels' checks of what a producer sends: check_batch's limits and property checks
against the JSON produce's own checks, encode_batch's argument types, and prefault's bounds."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.problems import ProblemError
from app.produce_parse import RESERVED_PROPERTIES, check_msg_id, check_tag
from store import (
    DEDUP_PROPERTY,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    _kernels,
)
from store import native as nk
from store.put.put_batch import MAX_RAW_PROPERTIES_BYTES, packed_raw, raw_item_of
from store.timer.timer_message import REQUEST_PROPERTIES
from store.timer.timer_message import RESERVED_PROPERTIES as TIMER_MARKS
from store.transaction.transaction_message import TRANSACTION_PROPERTIES

HOST_A = bytes([10, 0, 0, 7, 0, 0, 0x26, 0xAD])
HOST_B = bytes([192, 168, 1, 2, 0, 0, 0x1F, 0x90])


def reference_property_error(props: bytes) -> nk.BatchErrorCode | None:
    """What check_batch's property checks decide, item by item, with the JSON produce's own checks of a tag and a msg_id."""
    *items, rest = props.split(b"\x02")
    for item in items:
        name, sep, value = item.partition(b"\x01")
        if not sep or not name or b"\x01" in value:
            return nk.BatchErrorCode.BAD_PROPERTY
        try:
            text = name.decode("utf-8")
            if text in nk.RESERVED_BATCH_PROPERTIES:
                return nk.BatchErrorCode.RESERVED_PROPERTY
            value_text = value.decode("utf-8")
        except UnicodeDecodeError:
            return nk.BatchErrorCode.BAD_PROPERTY
        try:
            if text == "TAGS":
                check_tag(value_text)
            elif text == "UNIQ_KEY":
                check_msg_id(value_text)
        except ProblemError:
            return nk.BatchErrorCode.BAD_TAGS if text == "TAGS" else nk.BatchErrorCode.BAD_UNIQ_KEY
    return nk.BatchErrorCode.BAD_PROPERTY if rest else None


prop_piece = st.one_of(
    st.sampled_from(
        [b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"WAIT", b"REAL_TOPIC", b"REAL_QID", b"TIMER_DELIVER_MS", b"TIMER_DELAY_MS"]
        + [b"TIMER_DELAY_SEC", b"TIMER_OUT_MS", b"TRAN_MSG", b"DELAYS", b"WAI", b"a", b""]
    ),
    st.sampled_from(
        [b"\x01", b"\x02", b"||", b"|", b"*", b" ", b"\x7f", b"\xc2\x85", b"\xc2\xa0", b"\xed\xa0\x80", b"\xff", b"\xf0\x9f\x98"]
    ),
    st.text(max_size=6).map(str.encode),
    st.sampled_from([b"x" * 255, b"\xc3\xa9" * 128, b"y" * 129]),
    # Runs around the kernel's 8-byte steps, with the bytes its word tests look for (0..2, 3, high bits).
    st.sampled_from([b"abcdefg", b"abcdefgh", b"abcdefghi", b"\x00", b"\x03", b"k" * 16 + b"\x00", b"0123456789abcde\x80"]),
)


@settings(max_examples=3000)
@given(st.lists(prop_piece, max_size=10).map(b"".join))
def test_check_batch_property_checks_match_the_json_produce(props: bytes) -> None:
    batch = nk.pack_batch([(b"body", props, 0)])
    want = reference_property_error(props)
    assert nk.check_batch(batch, 100)[0] == 1  # without the property checks only the layout counts
    if want is None:
        assert nk.check_batch(batch, 100, check_properties=True) == (1, 91 + 4 + len(props))
    else:
        with pytest.raises(nk.BatchError) as e:
            nk.check_batch(batch, 100, check_properties=True)
        assert (e.value.args[1], e.value.args[2], e.value.index) == (want, 0, 0)


dedup_piece = st.one_of(
    st.sampled_from([b"TIDEMQ_DEDUP_ID\x01", b"TIDEMQ_DEDUP_ID", b"TIDEMQ_DEDUP_I\x01", b"XTIDEMQ_DEDUP_ID\x01", b"\x01TIDEMQ_DEDUP_ID"]),
    st.sampled_from([b"\x01", b"\x02", b"KEYS\x01", b"a", b"id-1", b"TIDEMQ_DEDUP_ID\x01id-2\x02"]),
)


@settings(max_examples=500)
@given(st.lists(st.lists(dedup_piece, max_size=8).map(b"".join), min_size=1, max_size=4))
def test_check_batch_crcs_finds_a_dedup_id_where_the_reference_decoding_does(props_list: list[bytes]) -> None:
    """The kernel's has_dedup_id is true exactly when a well-formed item has a TIDEMQ_DEDUP_ID property (as
    the put's dedup hook reads it from the decoded properties); a malformed batch is refused whatever it holds."""
    batch = nk.pack_batch([(b"body", props, 0) for props in props_list])
    if any(reference_property_error(props) is not None for props in props_list):
        with pytest.raises(nk.BatchError):
            nk.check_batch_crcs(batch, 100, check_properties=True)
        return
    want = any(
        name == b"TIDEMQ_DEDUP_ID" for props in props_list for name, _, _ in (p.partition(b"\x01") for p in props.split(b"\x02")[:-1])
    )
    assert nk.check_batch_crcs(batch, 100, check_properties=True)[3] is want


def test_the_reserved_names_are_a_delay_the_real_destination_and_the_timers_and_transactions_marks() -> None:
    assert nk.RESERVED_BATCH_PROPERTIES == {
        PROPERTY_DELAY, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, *REQUEST_PROPERTIES, *TIMER_MARKS, *TRANSACTION_PROPERTIES
    }  # fmt: skip
    # What the JSON produce reserves, but for what an item carries as its own (tag, keys, id, dedup id) and WAIT.
    own = {PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, DEDUP_PROPERTY, PROPERTY_WAIT}
    assert nk.RESERVED_BATCH_PROPERTIES == RESERVED_PROPERTIES - own
    assert PROPERTY_WAIT not in nk.RESERVED_BATCH_PROPERTIES


def test_what_a_rocketmq_producer_sets_passes_and_each_reserved_name_is_refused() -> None:
    # DefaultMQProducer.batch: WAIT from Message's constructor, UNIQ_KEY from MessageClientIDSetter, TAGS and KEYS when given.
    producer = b"WAIT\x01true\x02TAGS\x01paid\x02KEYS\x01order-1 cust-7\x02UNIQ_KEY\x017F0000010F2A1B6D3586000000070001\x02"
    for props in (producer, producer + b"BUYER_ID\x01b-1\x02", b"WAIT\x01false\x02"):
        assert nk.check_batch(nk.pack_batch([(b"x", props, 0)]), 10, check_properties=True)[0] == 1
    for name in sorted(nk.RESERVED_BATCH_PROPERTIES):
        batch = nk.pack_batch([(b"x", producer, 0), (b"y", producer + f"{name}\x013\x02".encode(), 0)])
        with pytest.raises(nk.BatchError) as e:
            nk.check_batch(batch, 10, check_properties=True)
        assert (e.value.args[1], e.value.index) == (nk.BatchErrorCode.RESERVED_PROPERTY, 1)


def test_check_batch_limits_name_the_item() -> None:
    items = [(b"a", b"", 0), (b"bb", b"TAGS\x01t\x02", 0), (b"c" * 50, b"k\x01v\x02", 0)]
    batch = nk.pack_batch(items)
    second, third = 23, 23 + 22 + 2 + 7
    kwargs: Any  # check_batch's keyword limits: as a dict[str, int], mypy would match it to check_properties too
    assert nk.check_batch(batch, 50, max_count=3, max_properties_bytes=7, check_properties=True)[0] == 3
    for kwargs, code, pos, index in (
        ({"max_count": 2}, nk.BatchErrorCode.TOO_MANY, third, 2),
        ({"max_properties_bytes": 3}, nk.BatchErrorCode.PROPERTIES_TOO_LARGE, second, 1),
    ):
        with pytest.raises(nk.BatchError) as e:
            nk.check_batch(batch, 50, **kwargs)
        assert (e.value.args[1:], e.value.index) == ((code, pos), index)
    with pytest.raises(nk.BatchError) as e:
        nk.check_batch(batch, 49)
    assert (e.value.args[1:], e.value.index) == ((nk.BatchErrorCode.BODY_TOO_LARGE, third), 2)
    negative = bytearray(batch)
    negative[16:20] = (-1).to_bytes(4, "big", signed=True)
    with pytest.raises(nk.BatchError) as e:
        nk.check_batch(negative, 50)
    assert e.value.args[1:] == (nk.BatchErrorCode.BAD_BODY, 0)


# Prefault ----------------------------------------------------------------------------------


def test_prefault_faults_pages_in_without_changing_a_byte(tmp_path: Path) -> None:
    import mmap

    path = tmp_path / "f"
    size = 64 * mmap.PAGESIZE
    with open(path, "wb") as fh:
        fh.write(bytes(range(256)) * (size // 256))
    with open(path, "r+b") as fh:
        mm = mmap.mmap(fh.fileno(), size)
    try:
        assert nk.prefault(mm, 0, size) == 1  # the kernel here has MADV_POPULATE_WRITE (Linux 5.14+)
        assert nk.prefault(mm, 3, size - 7) == 1  # partial pages at both ends are touched
        assert nk.prefault(mm, 5, 9) == 2  # inside one page: only touched
        assert nk.prefault(mm, size, 0) == 1
        assert mm[:] == bytes(range(256)) * (size // 256)
        for pos, length in ((-1, 1), (0, size + 1), (size, 1), (1, -1), (2**62, 2**62)):
            with pytest.raises(ValueError):
                nk.prefault(mm, pos, length)
    finally:
        mm.close()
    buf = bytearray(b"\x05" * 100_000)
    assert nk.prefault(buf, 0, len(buf)) in (1, 2) and buf == b"\x05" * 100_000
    with pytest.raises(TypeError):
        nk.prefault(b"read-only", 0, 1)


def test_encode_argument_types_are_checked_as_the_signature_says() -> None:
    from store import _kernels

    batch, dest, out = nk.pack_batch([(b"abc", b"", 0)]), bytearray(200), bytearray(16)
    args: list[Any] = [dest, 0, 200, batch, 0, out, 1, b"T", 0, 0, 1, HOST_A, 2, HOST_B, 0, 0, 0, 0]
    assert _kernels.encode_batch(*args)[:2] == (nk.Stop.DONE, 1)
    for index, bad, error in (
        (0, bytes(200), BufferError),  # dest must be writable
        (5, bytes(16), BufferError),  # out too
        (7, "T", TypeError),  # topic is bytes, not text
        (8, 2**31, OverflowError),  # queue id is an int32
        (10, 2**63, OverflowError),  # born timestamp is an int64
        (1, "0", TypeError),
    ):
        with pytest.raises(error):
            _kernels.encode_batch(*args[:index], bad, *args[index + 1 :])  # type: ignore[call-arg]  # 18 arguments, spliced
    with pytest.raises(TypeError):
        _kernels.encode_batch(*args[:-1])


def test_assertions_are_compiled_into_the_asan_build_only() -> None:
    """make test-native-asan builds with -UNDEBUG (the kernels' assert() calls on); the normal build with -DNDEBUG."""
    asan = "libasan" in os.environ.get("LD_PRELOAD", "")
    assert _kernels.ASSERTIONS == (1 if asan else 0)


def test_a_second_module_instance_shares_the_process_wide_error_class() -> None:
    """The extension initialises in phases (PEP 489): another instance made from its spec runs the exec
    step again, and keeps the one BatchError the kernels raise."""
    spec = importlib.util.find_spec("store._kernels")
    assert spec is not None and spec.loader is not None
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    assert other is not _kernels
    assert other.BatchError is _kernels.BatchError and other.Mapping is _kernels.Mapping
    with pytest.raises(_kernels.BatchError):
        other.check_batch(b"\x00" * 3, 1024)


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(max_size=3000),
    properties=st.binary(max_size=300),
    head=st.text(alphabet="0123456789ABCDEF", min_size=28, max_size=28),
    first=st.integers(min_value=0, max_value=2**64 - 1),
)
def test_raw_item_writes_what_its_reference_writes(body: bytes, properties: bytes, head: str, first: int) -> None:
    """`raw_item` (every raw produce's packing) against `raw_item_of`, and the batch check reads it as one item."""
    item = _kernels.raw_item(body, properties, head.encode(), first)
    assert item == raw_item_of(body, properties, head.encode(), first)
    assert nk.check_batch(item, len(body))[0] == 1


def test_raw_item_refuses_what_its_length_fields_cannot_hold() -> None:
    head = b"0" * 28
    longest = MAX_RAW_PROPERTIES_BYTES
    assert _kernels.raw_item(b"b", b"p" * longest, head, 1) == raw_item_of(b"b", b"p" * longest, head, 1)
    with pytest.raises(OverflowError):
        raw_item_of(b"b", b"p" * (longest + 1), head, 1)  # the reference's own refusal
    with pytest.raises(OverflowError):
        _kernels.raw_item(b"b", b"p" * (longest + 1), head, 1)
    with pytest.raises(ValueError, match="28 characters"):
        _kernels.raw_item(b"b", b"", b"0" * 27, 1)
    with pytest.raises(TypeError):
        _kernels.raw_item(b"b", b"", head)  # type: ignore[call-arg]  # three arguments: refused, not read past
    with pytest.raises(TypeError):
        _kernels.raw_item(bytearray(b"b"), b"", head, 1)  # type: ignore[arg-type]  # bytes only
    assert packed_raw(b"b", -1, 10, b"p" * (longest + 1)) is None  # the caller's own path refuses it
