"""tidemq.batch_codec: the produce batch format round-trips, and broken bytes are refused, never over-read."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq import BatchFormatError, BatchMessage, decode_batch, decode_stored, encode_batch

names = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), min_size=1, max_size=8)
messages = st.builds(
    BatchMessage,
    body=st.binary(max_size=64),
    tags=st.none() | st.text(alphabet="abcXYZ09-", min_size=1, max_size=8),
    keys=st.lists(st.text(alphabet="abc123", min_size=1, max_size=5), max_size=3),
    msg_id=st.none() | st.text(alphabet="ABC0123456789", min_size=1, max_size=12),
    properties=st.dictionaries(names.filter(lambda n: n not in ("TAGS", "KEYS", "UNIQ_KEY")), names, max_size=3),
    flag=st.integers(-(2**31), 2**31 - 1),
)


@given(st.lists(messages, max_size=5), st.booleans())
def test_a_batch_decodes_to_what_was_encoded(batch: list[BatchMessage], with_crc: bool) -> None:
    assert decode_batch(encode_batch(batch, with_crc)) == batch


def test_the_encoding_is_the_documented_layout() -> None:
    data = encode_batch([BatchMessage(b"order 1", tags="paid")])
    props = b"TAGS\x01paid\x02"
    assert data == struct.pack(">iiiii", 22 + 7 + len(props), 0, 0, 0, 7) + b"order 1" + struct.pack(">H", len(props)) + props


@pytest.mark.parametrize("cut", [1, 10, 21, 25])
def test_a_truncated_batch_is_refused(cut: int) -> None:
    data = encode_batch([b"hello world", b"again"])
    with pytest.raises(BatchFormatError):
        decode_batch(data[:-cut])


def test_stored_bytes_that_are_not_messages_are_refused() -> None:
    with pytest.raises(BatchFormatError):
        decode_stored(b"\x00" * 100)
    with pytest.raises(BatchFormatError):
        decode_stored(b"\x00\x00")
