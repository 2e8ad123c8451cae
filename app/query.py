"""The one parser of query strings: every parameter is read once, for the access gate and the routes alike.

Starlette decodes a bad percent-escape to U+FFFD and keeps the last of repeated names, while a
reader that takes the first would see another value: with `topic=a&topic=b` a gate could judge
`a` and a route serve `b`. So the query is parsed once, strictly, by the server's outermost ASGI
callable (app.hot_routes, outside the access gate, in front of every route): invalid UTF-8 or a
name given twice is 400 REQUEST_INVALID on every path, before anything is judged or stored. The result sits in the scope under
`QUERY_KEY`; the gate, the hot routes' handlers and the FastAPI routes (through
`app.strict_route.StrictRequest`, whose `query_params` is this mapping) all read it from there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from urllib.parse import parse_qsl

from starlette.types import Scope

from app.problems import ProblemError

# The scope key holding the request's parsed query (a dict of name -> value, each name once).
QUERY_KEY = "tidemq.query"


def parse_query(query_string: bytes) -> dict[str, str]:
    """The query's parameters; ProblemError REQUEST_INVALID for invalid UTF-8 or a name given twice."""
    if not query_string:
        return {}
    text = query_string.decode("latin-1")
    if "%" in text or "+" in text:
        try:
            pairs = parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict")
        except UnicodeDecodeError:
            raise ProblemError("REQUEST_INVALID", "query parameters must be percent-encoded UTF-8") from None
    else:  # nothing to unquote: parse_qsl's split, without its per-field unquote calls
        pairs = [(name, value) for name, _, value in (field.partition("=") for field in text.split("&") if field)]
    params = dict(pairs)
    if len(params) != len(pairs):
        twice = sorted(name for name, count in Counter(name for name, _ in pairs).items() if count > 1)
        raise ProblemError("REQUEST_INVALID", f"query parameter(s) given more than once: {', '.join(twice)[:200]}")
    return params


def query_of(scope: Scope) -> Mapping[str, str]:
    """The request's parsed query: app.hot_routes put it in the scope (parsed here, once, for an app served without it)."""
    params: Mapping[str, str] | None = scope.get(QUERY_KEY)
    if params is None:
        params = scope[QUERY_KEY] = parse_query(scope["query_string"])
    return params
