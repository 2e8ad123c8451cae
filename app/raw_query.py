"""RawQuery: the query of a raw produce the store may pack (`store.packed_raw`), read without app.produce_parse.

A raw (`application/octet-stream`) produce names its message's fields in the query. The common ones, a queue, a
tag and keys, are taken here when their values need no unquoting, so the store packs the body with them as it
packs one without; any other query (another parameter, a name twice, an empty value, a byte that is not an
unreserved URL character or a keys comma, a tag past MAX_TAG_CHARS, a queue id past 18 digits) is left to
app.produce_parse.parse_raw, which answers it (its checks, its problems). What is taken here is what parse_raw
would take: such a tag passes check_tag and such keys check_keys, and the properties are in the order
store.put.put_batch.properties_of writes them (TAGS, then KEYS), so the stored bytes are the same.
"""

from __future__ import annotations

from typing import NamedTuple

from app.produce_parse import MAX_TAG_CHARS
from store import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS

# Bytes a value may hold and be taken as it is: RFC 3986's unreserved characters (nothing to unquote; no space,
# control character, `|`, `*`, \x01 or \x02, which check_tag and check_keys refuse).
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_KEYS_BYTES = _UNRESERVED | {ord(",")}  # keys are comma-separated
_QUEUE_ID_DIGITS_MAX = 18  # what parse_raw's int parameter takes at most
_TAGS_NAME = PROPERTY_TAGS.encode()
_KEYS_NAME = PROPERTY_KEYS.encode()
_KEY_SEPARATOR = KEY_SEPARATOR.encode()


class RawQuery(NamedTuple):
    """A raw produce's queue (-1: none named) and its message's properties before the UNIQ_KEY, encoded."""

    queue_id: int
    properties: bytes


NO_QUERY = RawQuery(-1, b"")


def raw_query(query: bytes) -> RawQuery | None:
    """The queue and properties `query` gives a raw produce, None when parse_raw must read it (module docstring)."""
    if not query:
        return NO_QUERY
    queue_id, tags, keys = -1, b"", b""
    for field in query.split(b"&"):
        name, sign, value = field.partition(b"=")
        if not sign or not value:
            return None
        if name == b"queue_id" and queue_id < 0 and len(value) <= _QUEUE_ID_DIGITS_MAX and value.isdigit():
            queue_id = int(value)
        elif name == b"tags" and not tags and len(value) <= MAX_TAG_CHARS and _UNRESERVED.issuperset(value):
            tags = value
        elif name == b"keys" and not keys and _KEYS_BYTES.issuperset(value):
            keys = _KEY_SEPARATOR.join(key for key in value.split(b",") if key)
            if not keys:  # only commas: parse_raw's keys are none; left to it
                return None
        else:
            return None
    properties = b"%s\x01%s\x02" % (_TAGS_NAME, tags) if tags else b""
    if keys:
        properties += b"%s\x01%s\x02" % (_KEYS_NAME, keys)
    return RawQuery(queue_id, properties)
