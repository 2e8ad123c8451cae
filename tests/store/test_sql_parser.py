"""The SQL92 filter parser: RocketMQ's grammar (SelectorParser.jj), its precedence, the checks its
expression classes make while the tree is built, errors with positions, and the bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import FilterInvalid, SqlFilter
from store.filter.sql_parser import MAX_DEPTH, MAX_NODES, MAX_PROPERTIES, MAX_SQL_CHARS, Node, Op, parse
from store.filter.sql_values import JType

SYMBOLS = {Op.EQ: "=", Op.GT: ">", Op.GE: ">=", Op.LT: "<", Op.LE: "<="}


def shape(node: Node) -> str:
    """The tree as an S-expression: properties by name, literals typed (i 5, l 5, d 5.0, s 'x', TRUE, NULL)."""
    if node.op is Op.CONST:
        if node.value is None:
            return "NULL"
        t, x = node.value
        if t is JType.BOOL:
            return "TRUE" if x else "FALSE"
        return {JType.INT: f"i{x}", JType.LONG: f"l{x}", JType.DOUBLE: f"d{x!r}", JType.STRING: repr(x)}[t]
    if node.op is Op.PROP:
        return node.name
    head = SYMBOLS.get(node.op, node.op.name)
    parts = [shape(a) for a in node.args] + [repr(t) for t in node.texts]
    return f"({head} {' '.join(parts)})"


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        # comparisons and the literal types (an integer is an Integer when it fits, else a Long)
        ("a = 1", "(= a i1)"),
        ("a <> 'x'", "(NOT (= a 'x'))"),
        ("a > 2147483647", "(> a i2147483647)"),
        ("a >= 2147483648", "(>= a l2147483648)"),
        ("a < 5L", "(< a i5)"),
        ("a <= 1.5", "(<= a d1.5)"),
        ("a > .5e1", "(> a d5.0)"),
        ("a > 5.", "(> a d5.0)"),
        ("a > 1E3", "(> a d1000.0)"),
        ("a > -5", "(> a (NEG i5))"),
        ("a > +5", "(> a i5)"),
        ("a > - -5", "(> a (NEG (NEG i5)))"),
        ("a = TRUE", "(= a TRUE)"),
        ("a = 'it''s'", '(= a "it\'s")'),
        ("a = ''", "(= a '')"),
        # IS [NOT] NULL, BETWEEN, IN, CONTAINS, STARTSWITH, ENDSWITH and their NOT forms
        ("a IS NULL", "(= a NULL)"),
        ("a IS NOT NULL", "(NOT (= a NULL))"),
        ("a BETWEEN 1 AND 5", "(AND (>= a i1) (<= a i5))"),
        ("a NOT BETWEEN 1 AND 5", "(OR (< a i1) (> a i5))"),
        ("a BETWEEN -5 AND -10", "(AND (>= a (NEG i5)) (<= a (NEG i10)))"),  # negations are not constants: not ordered
        ("a IN ('x', 'y')", "(IN a 'x' 'y')"),
        ("a NOT IN ('x')", "(NOT_IN a 'x')"),
        ("(a) IN ('x')", "(IN a 'x')"),
        ("a CONTAINS 'x'", "(CONTAINS a 'x')"),
        ("a NOT CONTAINS 'x'", "(NOT_CONTAINS a 'x')"),
        ("a STARTSWITH 'x'", "(STARTS_WITH a 'x')"),
        ("a NOT STARTSWITH 'x'", "(NOT_STARTS_WITH a 'x')"),
        ("a ENDSWITH 'x'", "(ENDS_WITH a 'x')"),
        ("a NOT ENDSWITH 'x'", "(NOT_ENDS_WITH a 'x')"),
        ("'abc' CONTAINS 'b'", "(CONTAINS 'abc' 'b')"),
        # conditions: a property alone is cast; TRUE, FALSE and NULL are conditions
        ("a", "(BOOL_CAST a)"),
        ("NOT a", "(NOT (BOOL_CAST a))"),
        ("TRUE", "TRUE"),
        ("NULL", "NULL"),
        ("NOT NULL", "(NOT NULL)"),
        ("a AND b", "(AND (BOOL_CAST a) (BOOL_CAST b))"),
        # precedence: OR < AND < = <> IS < > >= < <= BETWEEN IN ... < unary
        ("a = 1 OR b = 2 AND c = 3", "(OR (= a i1) (AND (= b i2) (= c i3)))"),
        ("(a = 1 OR b = 2) AND c = 3", "(AND (OR (= a i1) (= b i2)) (= c i3))"),
        ("a > 1 = TRUE", "(= (> a i1) TRUE)"),
        ("a = 1 IS NULL", "(= (= a i1) NULL)"),
        ("NOT a = 1", "(= (NOT (BOOL_CAST a)) i1)"),  # RocketMQ's grammar: NOT binds tighter than =
        ("NOT (a = 1)", "(NOT (= a i1))"),
        ("a BETWEEN 1 AND 2 AND b = 1", "(AND (AND (>= a i1) (<= a i2)) (= b i1))"),
        ("a = 1 AND b = 2 AND c = 3", "(AND (AND (= a i1) (= b i2)) (= c i3))"),
        ("a CONTAINS 'x' CONTAINS 'y'", "(CONTAINS (CONTAINS a 'x') 'y')"),
        # keywords in any case, names as written; comments; whitespace
        ("a is not null and B in ('1') oR c between 1 aNd 2", "(OR (AND (NOT (= a NULL)) (IN B '1')) (AND (>= c i1) (<= c i2)))"),
        ("$x_1 = 1", "(= $x_1 i1)"),
        ("nota = 1", "(= nota i1)"),
        ("a /* note */ = -- line\n\t1", "(= a i1)"),
        ("a = 1 -- to the end of the text", "(= a i1)"),
        ("a > --5", "(> a (NEG (NEG i5)))"),  # no line end: two minus signs, as JavaCC reads it
        ("\r\n\fa\t=\n1 ", "(= a i1)"),
    ],
)
def test_every_operator_and_the_precedence(text: str, tree: str) -> None:
    assert shape(parse(text)) == tree


@pytest.mark.parametrize(
    ("text", "position", "reason"),
    [
        ("", 0, "expected a value"),
        ("a and between 2 and 10", 6, "expected a value"),  # RocketMQ's ParserTest.invalidExpression
        (" a between 10 and 0", 11, "low bound"),  # its illegalBetween
        ("a between 1.5 and 1", 10, "low bound"),
        ("a between NULL and 1", 10, "cannot be NULL"),
        ("a between 'a' and 'b'", 10, "only numbers"),
        ("a > 100000000000000000000000", 4, "at most 9223372036854775807"),  # its decimalOverFlow
        ("a > 1e400", 4, "finite"),
        ("a > 0.0", 4, "4.9E-324"),  # createFloat refuses a literal below Double.MIN_VALUE
        ("a = NULL", 4, "IS NULL"),
        ("NULL <> a", 0, "IS NULL"),
        ("TRUE = 1", 0, "TRUE or FALSE"),
        ("a > 'x'", 4, "only numbers"),
        ("a > TRUE", 4, "only numbers"),
        ("(a = 1) > 1", 1, "a condition cannot be compared"),
        ("5", 0, "not a condition"),
        ("'x' OR a", 0, "not a condition"),
        ("a OR -b", 5, "not a condition"),
        ("NOT 5", 4, "not a condition"),
        ("a = 1 b = 2", 6, "expected AND, OR or the end"),
        ("a = 1 -", 6, "expected AND, OR or the end"),
        ("a = 1)", 5, "expected AND, OR or the end"),
        ("(a = 1", 6, "expected ')'"),
        ("a IN ('x'", 9, "',' or ')'"),
        ("a IN (1)", 6, "a string in the IN list"),
        ("a IN ()", 6, "a string in the IN list"),
        ("'x' IN ('x')", 0, "IN needs a property"),
        ("a CONTAINS b", 11, "a string after CONTAINS"),
        ("a NOT = 1", 6, "after NOT"),
        ("a IS 1", 5, "NULL after IS"),
        ("a IS NOT TRUE", 9, "NULL after IS NOT"),
        ("a BETWEEN 1 OR 2", 12, "AND between"),
        ("a = 'x", 4, "string is not closed"),
        ("a = 1 /* open", 6, "comment is not closed"),
        ("a == 1", 3, "expected a value"),
        ("a != 1", 2, "unexpected character '!'"),
        ('a = "x"', 4, "unexpected character"),
        ("a.b = 1", 1, "unexpected character '.'"),
        ("0L = a", 1, "expected AND, OR or the end"),  # "0" then the name L
        ("a = 007", 5, "expected AND, OR or the end"),  # "0", "0", "7"
        ("a = ١", 4, "unexpected character"),  # digits are ASCII only
        ("a = '\ud800'", 5, "not valid Unicode"),
    ],
)
def test_errors_name_the_position(text: str, position: int, reason: str) -> None:
    with pytest.raises(FilterInvalid) as caught:
        SqlFilter.parse(text)
    assert caught.value.position == position, caught.value
    assert reason in caught.value.reason, caught.value


def test_bounds_are_refused_with_a_position() -> None:
    def refused(text: str) -> FilterInvalid:
        with pytest.raises(FilterInvalid) as caught:
            parse(text)
        return caught.value

    assert parse("a = '" + "x" * (MAX_SQL_CHARS - 6) + "'").op is Op.EQ  # MAX_SQL_CHARS characters
    assert refused("a = '" + "x" * (MAX_SQL_CHARS - 5) + "'").position == MAX_SQL_CHARS
    many = " OR ".join(f"p{i % 10} = {i}" for i in range(MAX_NODES // 3 + 1))
    assert "nodes" in refused(many).reason
    names = " OR ".join(f"p{i} = 1" for i in range(MAX_PROPERTIES + 1))
    e = refused(names)
    assert "properties" in e.reason and e.position == names.index(f"p{MAX_PROPERTIES} ")
    # Nesting: parentheses and prefixes while parsing, comparisons in the tree.
    assert "levels" in refused("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1)).reason
    assert "levels" in refused("NOT " * (MAX_DEPTH + 1) + "a").reason
    assert "levels" in refused("a = TRUE" + " = TRUE" * MAX_DEPTH).reason
    assert parse("(" * (MAX_DEPTH - 1) + "a" + ")" * (MAX_DEPTH - 1)).op is Op.BOOL_CAST
    # AND and OR chains are flat: a long chain is one level.
    chain = parse(" AND ".join(f"p{i % 50} = {i}" for i in range(100)))
    assert chain.depth == 3 and chain.op is Op.AND


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([*"aAbN() '=<>!-+.,0159eE\n*/$_", "AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN"])).map("".join))
def test_any_text_parses_or_is_refused_with_a_position_inside_it(text: str) -> None:
    try:
        root = parse(text)
    except FilterInvalid as e:
        assert 0 <= e.position <= len(text)
    else:
        assert root.is_boolean and root.depth <= MAX_DEPTH


def test_parses_are_cached() -> None:
    assert SqlFilter.parse("cached = 1") is SqlFilter.parse("cached = 1")
