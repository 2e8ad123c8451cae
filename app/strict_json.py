"""JSON bodies whose objects name each member once.

RFC 8259 leaves duplicate names to the parser; orjson and json keep the last, so
`{"body": "a", "body": "b"}` would store "b" without a word. Every JSON body is refused with
400 BODY_INVALID when an object repeats a name: produce bodies through `duplicate_name`
(after orjson's parse), the FastAPI routes' bodies through `reject_duplicates`
(app.strict_route).

The produce check is cheap for the usual body, without a second parse: when the text holds no
backslash, every `"` delimits a string, so each `:` outside strings follows exactly one name
and every name is followed by one. The text's `:` count is then at least its names, which are
at least the parsed objects' members (a repeated name collapses into one member). So when the
`:` count equals the members counted in the parsed document, no object repeats a name. Only
otherwise (a backslash, or a `:` inside a string) is the text parsed again, with a hook that
sees every object's name list.
"""

from __future__ import annotations

import json
from typing import Any


class DuplicateName(ValueError):
    """Raised when a JSON object names a member twice."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the name {name[:60]!r} appears twice in one object")
        self.name = name


def reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise DuplicateName(name)
            seen.add(name)
    return obj


def members(doc: Any) -> int:
    """The number of members of every object in a parsed document."""
    count = 0
    stack = [doc]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is dict:
            count += len(node)
            stack.extend(node.values())
        elif kind is list:
            stack.extend(node)
    return count


def colons_are(data: bytes, expected: int) -> bool:
    """Whether `data` holds exactly `expected` bytes `:`. Found one by one (`find` of one byte is a
    vectorised memchr; `count` walks byte by byte) and given up past `expected`, so a text with
    a colon in every string costs at most `expected` steps before the caller parses it again."""
    find = data.find
    at = -1
    for _ in range(expected):
        at = find(b":", at + 1)
        if at < 0:
            return False
    return find(b":", at + 1) < 0


def duplicate_name(data: bytes, doc: Any) -> str | None:
    """A name some object of `data` repeats, else None; `doc` is `data` as parsed (by orjson)."""
    if b"\\" not in data and colons_are(data, members(doc)):
        return None
    try:
        json.loads(data, object_pairs_hook=reject_duplicates)
    except DuplicateName as e:
        return e.name
    except ValueError:  # parsed by orjson, refused by json (e.g. a number json reads differently): no verdict
        return None
    return None
