"""app.query.parse_query: the split it takes for a query with nothing to unquote reads what parse_qsl reads."""

from __future__ import annotations

import random
from urllib.parse import parse_qsl

import pytest

from app.problems import ProblemError
from app.query import parse_query


def reference(query: bytes) -> dict[str, str] | str:
    """parse_qsl's reading of `query` as parse_query's rules take it: the dict, or the problem's reason."""
    try:
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        return "utf-8"
    params = dict(pairs)
    return params if len(params) == len(pairs) else "twice"


def outcome(query: bytes) -> dict[str, str] | str:
    try:
        return parse_query(query)
    except ProblemError as e:
        assert e.code == "REQUEST_INVALID"
        return "twice" if "more than once" in e.detail else "utf-8"


@pytest.mark.parametrize(
    "query",
    [b"max=32&wait_ms=1000", b"a", b"a=", b"=1", b"&&a=1&&", b"a=1=2", b"a&b", b"&", b"x=\xc3\xa9", b"t=%C3%A9&u=a+b", b"a=1&a=2", b"a&a"],
)
def test_each_form_reads_as_parse_qsl_reads_it(query: bytes) -> None:
    assert outcome(query) == reference(query)


def test_random_queries_read_as_parse_qsl_reads_them() -> None:
    rng = random.Random(7)
    alphabet = b"ab=&+%2C\xe9"
    for _ in range(5000):
        query = bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 12)))
        assert outcome(query) == reference(query), query


def test_a_name_given_twice_or_a_bad_escape_is_refused() -> None:
    assert outcome(b"topic=a&topic=b") == "twice"
    assert outcome(b"topic=%FF") == "utf-8"
