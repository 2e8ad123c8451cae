"""The filter parameters of pull, receive and the event stream (`tag`, `sql`), and a group's filter.

Each is parsed once per request into what the store filters with (store.TagFilter,
store.MessageFilter); SqlFilter.parse caches its parses, so a consumer repeating its expression
does not parse it again. A bad expression is 400 TAG_INVALID or FILTER_INVALID (with `position`,
the 0-based character the problem concerns) before anything is read or stored.
"""

from __future__ import annotations

from typing import Any

from app.problems import ProblemError
from app.produce_parse import has_control
from store import FilterInvalid, MessageFilter, SqlFilter, TagFilter

# A tag filter as the spec declares it (control characters refused; parse_tag_filter checks the rest).
TAG_FILTER_TEXT = "Tag filter: '*' or TagA||TagB (tags separated by ||, none empty, no control characters)"
TAG_FILTER_SCHEMA = {"type": "string", "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]*$"}


def parse_tag_filter(tag: str | None) -> tuple[Any, frozenset[int] | None]:
    """The store's tag filter and the tags codes a held pull is woken by (None = any); parsed once, by the store."""
    problem = "tag must be '*' or tags without control characters separated by '||', e.g. TagA||TagB"
    if tag is not None and has_control(tag):
        raise ProblemError("TAG_INVALID", problem)
    try:
        tag_filter = TagFilter.parse(tag)
    except ValueError:
        raise ProblemError("TAG_INVALID", problem) from None
    if tag_filter is None:
        return None, None
    if "*" in tag_filter.tags:
        raise ProblemError("TAG_INVALID", problem)
    return tag_filter, tag_filter.codes


def parse_sql_filter(text: str | None) -> SqlFilter | None:
    """The SQL92 filter of a `sql=` parameter (None when absent); 400 FILTER_INVALID with the position otherwise."""
    if text is None:
        return None
    try:
        return SqlFilter.parse(text)
    except FilterInvalid as e:
        raise filter_invalid(e) from None


def filter_invalid(e: FilterInvalid) -> ProblemError:
    return ProblemError("FILTER_INVALID", f"sql: {e.reason} at position {e.position}", {"position": e.position})


def parse_message_filter(params: Any) -> tuple[Any, frozenset[int] | None]:
    """The store's filter of the `tag` and `sql` parameters, and the tags codes a held request is woken by (None = any)."""
    tag_filter, codes = parse_tag_filter(params.get("tag"))
    sql = parse_sql_filter(params.get("sql"))
    return (tag_filter, codes) if sql is None else (MessageFilter(tag_filter, sql), codes)
