"""SqlFilter: an SQL92 filter expression (RocketMQ's ExpressionType.SQL92) parsed once.

It holds the tree (store.filter.sql_parser), which the reference evaluator (store.filter.sql_eval) runs, and the
compiled program (store.filter.sql_program), which the gather kernel runs over each message's stored
properties while a pull copies messages (docs/native.md "sql_eval"). Parsing is cached, as
RocketMQ's SelectorParser caches it, so a consumer repeating its expression parses it once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from store.filter.sql_eval import matches
from store.filter.sql_parser import FilterInvalid, Node, Op, parse
from store.filter.sql_program import compile_program

# Expressions whose parse is kept (RocketMQ's SelectorParser keeps 100).
PARSE_CACHE_SIZE = 256


class SqlFilter:
    """A parsed expression: `tree` for the reference evaluator, `program` for the native one."""

    __slots__ = ("expression", "tree", "program")

    def __init__(self, expression: str, tree: Node) -> None:
        self.expression = expression
        self.tree = tree
        self.program = compile_program(tree)

    @staticmethod
    def parse(expression: str) -> SqlFilter:
        """The filter of an expression; FilterInvalid (with the position) when it is not one."""
        return _parse(expression)

    def both(self, other: SqlFilter) -> SqlFilter:
        """A filter passing what passes this one and `other` (RocketMQ's AND of the two); cached like a parse."""
        return _both(self, other)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """The reference evaluation: whether a message with these properties passes."""
        return matches(self.tree, properties)

    def __repr__(self) -> str:
        return f"SqlFilter({self.expression!r})"


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _parse(expression: str) -> SqlFilter:
    try:
        expression.encode("utf-8")
    except UnicodeEncodeError as e:
        raise FilterInvalid("the expression is not valid Unicode (a lone surrogate)", e.start) from None
    return SqlFilter(expression, parse(expression))


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _both(first: SqlFilter, second: SqlFilter) -> SqlFilter:
    a, b = first.tree, second.tree
    depth = 1 + max(a.depth - (a.op is Op.AND), b.depth - (b.op is Op.AND))
    return SqlFilter(f"({first.expression}) AND ({second.expression})", Node(Op.AND, 0, (a, b), depth=depth))


def filter_problem(expression: Any) -> FilterInvalid | None:
    """Why `expression` is not an SQL92 filter, or None when it is one."""
    if type(expression) is not str:
        return FilterInvalid("an SQL92 filter is a string", 0)
    try:
        SqlFilter.parse(expression)
    except FilterInvalid as e:
        return e
    return None
