"""SQL92 filter semantics: RocketMQ's documented behaviour (its filter module's ExpressionTest and the
rules of its expression classes), checked on the reference evaluator and on the native one.

Each case gives the outcome RocketMQ's `evaluate` gives: TRUE (the message matches), FALSE, NULL
(unknown: no match) or ABORTED (the evaluation throws in Java: no match). The native evaluator must
give the same, or DEFER where the case says it leaves the message to the reference.
"""

from __future__ import annotations

import pytest

from store import SqlFilter
from store.filter.sql_eval import evaluate
from store.filter.sql_values import FALSE, TRUE, EvalAborted
from store.native import SqlOutcome, sql_eval


def encode(props: dict[str, str]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


def reference(expression: str, props: dict[str, str]) -> str:
    try:
        value = evaluate(SqlFilter.parse(expression).tree, props)
    except EvalAborted:
        return "ABORTED"
    return "NULL" if value is None else "TRUE" if value == TRUE else "FALSE" if value == FALSE else repr(value)


# RocketMQ's filter/src/test/java/org/apache/rocketmq/filter/ExpressionTest.java, with its property values
# as a message carries them (strings), and its expected results.
RETRY = "a=3 and b<>4 And c>5 AND d<=4"
ROCKETMQ_CASES = [
    (RETRY, {"a": "3", "b": "5", "c": "6", "d": "1"}, "TRUE"),
    (RETRY, {"a": "4", "b": "5", "c": "6", "d": "1"}, "FALSE"),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "3"}, "TRUE"),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "5"}, "TRUE"),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "6"}, "TRUE"),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "2"}, "TRUE"),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "10"}, "FALSE"),
    ("a in ('3', '4', '5')", {"a": "4"}, "TRUE"),
    ("a in ('3', '4', '5')", {"a": "8"}, "FALSE"),
    ("a not in ('3', '4', '5')", {"a": "8"}, "TRUE"),
    ("a not in ('3', '4', '5')", {"a": "3"}, "FALSE"),
    ("a between 2 and 10", {"a": "2"}, "TRUE"),
    ("a between 2 and 10", {"a": "10"}, "TRUE"),
    ("a between 2 and 10", {"a": "11"}, "FALSE"),
    ("a not between 2 and 10", {"a": "1"}, "TRUE"),
    ("a not between 2 and 10", {"a": "3"}, "FALSE"),
    ("a is null", {"abc": "2"}, "TRUE"),
    ("a is null", {"a": "2"}, "FALSE"),
    ("a is not null", {"a": "2"}, "TRUE"),
    ("a is not null", {"abc": "2"}, "FALSE"),
    ("a is not null and a='hello'", {"a": "hello"}, "TRUE"),
    ("a is not null and a='hello'", {}, "FALSE"),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, "TRUE"),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, "FALSE"),
    ("a is null OR a='hello'", {}, "TRUE"),
    ("a is null OR a='hello'", {"a": "abc"}, "FALSE"),
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, "TRUE"),
    ("a > 3.1E10", {"a": "3.1415E10"}, "TRUE"),
    ("a > 3.14", {"a": "3.1415"}, "TRUE"),
    ("a > b", {"a": "10", "b": "20"}, "FALSE"),
    ("a > b", {"a": "20", "b": "10"}, "TRUE"),
    ("a=b", {"a": "3.14", "b": "3.14"}, "TRUE"),
    ("a<>b", {"a": "3.14", "b": "3.141"}, "TRUE"),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}, "ABORTED"),  # its testEvaluate_stringCompare
    ("key is not null and key between 0 and 100", {"key": "con"}, "ABORTED"),
    ("value contains 'x'", {"value": "axb"}, "TRUE"),
    ("value startswith 'ax'", {"value": "axb"}, "TRUE"),
    ("value endswith 'xb'", {"value": "axb"}, "TRUE"),
    ("value not contains 'x'", {"value": "axb"}, "FALSE"),
    ("value not startswith 'x'", {"value": "abb"}, "TRUE"),
    ("value contains ''", {"value": "axb"}, "FALSE"),
    ("value not contains ''", {"value": "axb"}, "FALSE"),
    ("value contains 'x'", {}, "FALSE"),
    ("value not endswith 'x'", {}, "FALSE"),
    ("'axb' contains 'x'", {}, "TRUE"),
    ("'axb' not startswith 'u'", {}, "TRUE"),
    ("' ' endswith ' '", {}, "TRUE"),
    ("'s' contains '\\'", {}, "FALSE"),
    ("a not in ('4', '4', '5') and b between 3 and 10 and c not contains 'axbc'", {"a": "3", "b": "3", "c": "axbdc"}, "TRUE"),
]

# The rules of the expression classes, case by case.
RULE_CASES = [
    # A missing property is null: a comparison with it is unknown, and NOT keeps it unknown.
    ("a > 5", {}, "NULL", None),
    ("NOT (a > 5)", {}, "NULL", None),
    ("a = 'x'", {}, "NULL", None),
    ("a <> 'x'", {}, "NULL", None),
    ("a IN ('x')", {}, "NULL", None),
    ("a NOT IN ('x')", {}, "NULL", None),
    ("'x' = a", {}, "FALSE", None),  # doCreateEqual: null only when the left side is
    ("a = b", {}, "TRUE", None),  # two nulls are equal
    ("a = b", {"a": "1"}, "FALSE", None),
    ("a = b", {"b": "1"}, "NULL", None),
    ("a > 5 OR b = 1", {"b": "1"}, "TRUE", None),
    ("a > 5 AND b = 1", {"b": "1"}, "NULL", None),
    ("a > 5 AND b = 1", {"b": "2"}, "FALSE", None),
    # A property as a condition is never TRUE: its value is a String, not a Boolean.
    ("a", {"a": "true"}, "FALSE", None),
    ("a", {}, "NULL", None),
    ("NOT a", {"a": "x"}, "TRUE", None),
    ("TRUE", {}, "TRUE", None),
    ("FALSE", {}, "FALSE", None),
    ("NULL", {}, "NULL", None),
    # NOT binds tighter than =: NOT a = 1 is (NOT a) = 1, a Boolean against an Integer.
    ("NOT a = 1", {"a": "1"}, "FALSE", None),
    ("NOT a = 1", {"a": "2"}, "FALSE", None),
    ("NOT (a = 1)", {"a": "2"}, "TRUE", None),
    # A String meets a number through Integer.valueOf, Long.valueOf or Double.valueOf (the number's class).
    ("a = 5", {"a": "5"}, "TRUE", None),
    ("a = 5", {"a": "+5"}, "TRUE", None),
    ("a = 5", {"a": "05"}, "TRUE", None),
    ("a = 5", {"a": "5.0"}, "ABORTED", None),
    ("a = 5", {"a": " 5"}, "ABORTED", None),
    ("a = 5.0", {"a": " 5 "}, "TRUE", None),  # Double.valueOf trims
    ("a = 5.0", {"a": "5d"}, "TRUE", None),
    ("a = 5.0", {"a": "0x1.4p2"}, "TRUE", "DEFER"),
    ("a > 1.0", {"a": "Infinity"}, "TRUE", None),
    ("a > 1.0", {"a": "NaN"}, "TRUE", None),  # Double.compare: NaN above everything
    ("a = 1.0", {"a": "NaN"}, "FALSE", None),
    ("a < 0.5", {"a": "-0.0"}, "TRUE", None),
    ("a > 2147483647", {"a": "2147483648"}, "ABORTED", None),  # an Integer literal: Integer.valueOf overflows
    ("a > 2147483646", {"a": "2147483647"}, "TRUE", None),
    ("a > 2147483648", {"a": "2147483649"}, "TRUE", None),  # a Long literal
    ("a > 2147483648", {"a": "9223372036854775808"}, "ABORTED", None),
    ("a = 3", {"a": "٣"}, "TRUE", "DEFER"),  # Integer.valueOf takes any Unicode decimal digit
    ("a = 3.0", {"a": "٣"}, "ABORTED", None),  # Double.valueOf does not
    ("a = 3", {"a": "𝟑"}, "ABORTED", "DEFER"),  # past the BMP: two surrogates in Java
    ("a > b", {"a": "1e3", "b": " 999 "}, "TRUE", None),  # two Strings compare as doubles
    ("a > b", {"a": "1", "b": "x"}, "ABORTED", None),
    ("a = b", {"a": "1", "b": "1.0"}, "FALSE", None),  # = compares Strings as Strings
    ("a = TRUE", {"a": "TRUE"}, "TRUE", None),
    ("a = TRUE", {"a": "yes"}, "FALSE", None),
    ("(a = 'x') = 'y'", {"a": "x"}, "ABORTED", None),  # a Boolean converted from a String: a ClassCastException
    ("(a = 'x') = 1", {"a": "x"}, "FALSE", None),
    ("(a = 'x') = TRUE", {"a": "x"}, "TRUE", None),
    ("1 = 1.0", {}, "TRUE", None),
    ("2147483648 = 2147483648.0", {}, "TRUE", None),
    ("-a > 5", {"a": "9"}, "NULL", None),  # a negated String is null
    ("a = -2147483648", {"a": "-2147483648"}, "TRUE", None),
    ("a = --2147483648", {"a": "2147483648"}, "TRUE", None),
    # What throws ends the evaluation, unless a short circuit never reaches it.
    ("a > 5 OR b = 'x'", {"a": "x", "b": "x"}, "ABORTED", None),
    ("b = 'x' OR a > 5", {"a": "x", "b": "x"}, "TRUE", None),
    ("b = 'y' AND a > 5", {"a": "x", "b": "x"}, "FALSE", None),
    ("c > 1 AND a > 5", {"a": "x"}, "ABORTED", None),  # null does not stop AND: a > 5 is reached, and throws
    ("a > 5 AND c > 1", {"a": "x"}, "ABORTED", None),
    ("c > a", {"a": "x"}, "NULL", None),  # a relation stops at a null left side
    ("a > c", {"a": "x"}, "NULL", None),
    ("a CONTAINS '' AND a > 5", {"a": "x"}, "FALSE", None),
    # Last occurrence of a property wins; names are case-sensitive; Unicode compares by characters.
    ("A = 'x'", {"a": "x"}, "NULL", None),
    ("a CONTAINS 'é'", {"a": "café"}, "TRUE", None),
    ("a STARTSWITH 'caf' AND a ENDSWITH 'é'", {"a": "café"}, "TRUE", None),
    ("a IN ('é', 'e')", {"a": "é"}, "TRUE", None),
]


@pytest.mark.parametrize(("expression", "props", "want"), ROCKETMQ_CASES)
def test_rocketmq_expression_test_cases(expression: str, props: dict[str, str], want: str) -> None:
    assert reference(expression, props) == want
    assert sql_eval(SqlFilter.parse(expression).program, encode(props)).name == want.replace("NULL", "UNKNOWN")


@pytest.mark.parametrize(("expression", "props", "want", "native"), RULE_CASES)
def test_evaluation_rules(expression: str, props: dict[str, str], want: str, native: str | None) -> None:
    assert reference(expression, props) == want
    got = sql_eval(SqlFilter.parse(expression).program, encode(props))
    assert got.name == (native or want.replace("NULL", "UNKNOWN"))
    assert SqlFilter.parse(expression).matches(props) is (want == "TRUE")


def test_the_last_occurrence_of_a_property_wins_and_invalid_utf8_is_left_to_the_reference() -> None:
    program = SqlFilter.parse("a = '2'").program
    assert sql_eval(program, b"a\x011\x02b\x01x\x02a\x012\x02") is SqlOutcome.TRUE
    assert sql_eval(program, b"a\x012\x02a\x011") is SqlOutcome.FALSE  # no trailing separator
    assert sql_eval(program, b"\x02\x02a\x012\x02junk\x02") is SqlOutcome.TRUE  # empty items and an item without a name
    assert sql_eval(program, b"a\x01\xff\x02") is SqlOutcome.DEFER
    assert sql_eval(SqlFilter.parse("b = 'x'").program, b"a\x01\xff\x02b\x01x\x02") is SqlOutcome.TRUE  # only named values count
