"""MessageFilter: what a get keeps by tag and by an SQL92 expression together.

A tag filter is checked first on the consume-queue entry's tags code (no commitlog read for a
message of another tag), then on the exact TAGS; the SQL92 expression is evaluated over the
message's properties after both. A group's own filter (store.pop.subscription_group_manager) joins a
request's filter with AND (`with_group_filter`).
"""

from __future__ import annotations

from typing import Any

from store.filter.sql_filter import SqlFilter
from store.queue.get_message_result import Filter, KernelArgs, TagFilter, properties_of_stored


class MessageFilter:
    """Messages whose tag is one of `tags` (when given) and for which `sql` is TRUE (when given)."""

    __slots__ = ("tags", "sql")

    def __init__(self, tags: TagFilter | None, sql: SqlFilter | None) -> None:
        assert tags is not None or sql is not None, "a MessageFilter filters by something"
        self.tags = tags
        self.sql = sql

    @classmethod
    def of(cls, tags: TagFilter | None, sql: SqlFilter | None) -> MessageFilter | None:
        """The filter of both, None when neither is given."""
        return None if tags is None and sql is None else cls(tags, sql)

    @property
    def codes(self) -> frozenset[int] | None:
        """The tags codes whose arrival can match (what a held pull is woken by); None: any arrival."""
        return self.tags.codes if self.tags is not None else None

    def kernel_args(self) -> KernelArgs:
        codes, tags = (self.tags.code_array, self.tags.tag_bytes) if self.tags is not None else (None, None)
        return codes, tags, self.sql.program if self.sql is not None else None

    def matches_code(self, tags_code: int) -> bool:
        return self.tags is None or self.tags.matches_code(tags_code)

    def matches_message(self, buf: Any) -> bool:
        """The reference check of a stored message (after its tags code matched): its tag, then the expression."""
        if self.tags is not None and not self.tags.matches_message(buf):
            return False
        return self.sql is None or self.sql.matches(properties_of_stored(buf))

    def __repr__(self) -> str:
        return f"MessageFilter({self.tags and sorted(self.tags.tags)!r}, {self.sql!r})"


def with_group_filter(request: Filter | None, group_sql: SqlFilter | None) -> Filter | None:
    """A request's filter joined with a group's SQL92 filter (both must pass)."""
    if group_sql is None:
        return request
    if request is None:
        return MessageFilter(None, group_sql)
    if isinstance(request, TagFilter):
        return MessageFilter(request, group_sql)
    assert isinstance(request, MessageFilter), request
    return MessageFilter(request.tags, group_sql if request.sql is None else request.sql.both(group_sql))
