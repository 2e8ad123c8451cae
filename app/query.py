"""Strict query strings for the produce and pull handlers: UTF-8 only, each name at most once.

Starlette decodes a bad percent-escape to U+FFFD and keeps the last of repeated names, so
`keys=%ff` would be stored as "\ufffd" and `queue_id=0&queue_id=1` would silently pick one.
Both are refused with 400 REQUEST_INVALID before anything is stored. The hot routes and the
FastAPI routes call the same handlers, so both ways in answer the same.
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import parse_qsl

from app.problems import ProblemError


def strict_query(query_string: bytes) -> dict[str, str]:
    """The query's parameters; REQUEST_INVALID for invalid UTF-8 or a name given twice."""
    if not query_string:
        return {}
    try:
        pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise ProblemError("REQUEST_INVALID", "query parameters must be percent-encoded UTF-8") from None
    params = dict(pairs)
    if len(params) != len(pairs):
        twice = sorted(name for name, count in Counter(name for name, _ in pairs).items() if count > 1)
        raise ProblemError("REQUEST_INVALID", f"query parameter(s) given more than once: {', '.join(twice)[:200]}")
    return params
