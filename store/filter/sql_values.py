"""SQL92 filter values: the Java types RocketMQ's filter evaluates with, and its conversions.

RocketMQ's filter (org.apache.rocketmq.filter.expression) evaluates over java.lang objects: a
message property is a String (null when the message has none), a literal a String, an Integer, a
Long, a Double or a Boolean. Comparing two values of different types converts one of them as
ComparisonExpression.__compare does, with the string conversions SelectorParser.parse turns on:
a String meets a number through Integer.valueOf, Long.valueOf or Double.valueOf (chosen by the
number's type) and a Boolean through Boolean.valueOf. A conversion that fails throws in Java, which
ends the evaluation of the whole expression, and ExpressionMessageFilter then counts the message as
not matching: here that is EvalAborted.

This module is the reference the native evaluator (store/_native/sql.c) is tested against, and it
decides the messages that evaluator leaves to Python (digits outside ASCII, hexadecimal floats,
long numbers, invalid UTF-8: docs/native.md "sql_eval").
"""

from __future__ import annotations

import enum
import re
import struct
import unicodedata

from store.errors import StoreError


class JType(enum.IntEnum):
    """A value's Java class; the numbers are the native program's constant types (docs/native.md)."""

    BOOL = 1  # java.lang.Boolean
    INT = 2  # java.lang.Integer
    LONG = 3  # java.lang.Long
    DOUBLE = 4  # java.lang.Double
    STRING = 5  # java.lang.String


# A value: None is Java's null; otherwise its class and its Python value (bool, int, float or str).
Value = tuple[JType, bool | int | float | str] | None

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
TRUE: Value = (JType.BOOL, True)
FALSE: Value = (JType.BOOL, False)

# Characters String.trim removes from both ends (Double.valueOf trims): those up to U+0020.
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))
# Double.valueOf's decimal form (FloatingDecimal.readJavaFormatString), ASCII digits only, after
# the trim: sign, digits with at most one point (at least one digit), exponent, one type suffix.
_DECIMAL = re.compile(r"([+-]?)((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?")
# Its hexadecimal form (FloatingDecimal's HEX_FLOAT_PATTERN): a binary exponent is required.
_HEX = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP]([+-]?)([0-9]+)[fFdD]?")
_DOUBLE_BITS = struct.Struct("<q")
_CANONICAL_NAN_BITS = 0x7FF8000000000000


class EvalAborted(StoreError):
    """Raised when evaluating a filter meets what throws in RocketMQ's Java evaluator (a number
    conversion that fails, a Boolean converted from a String): the message does not match."""


def java_digit(ch: str) -> int:
    """Character.digit(ch, 10) for one UTF-16 code unit: the decimal digit value of a character of
    category Nd in the BMP, -1 otherwise (a character past the BMP is two surrogates in Java)."""
    if "0" <= ch <= "9":
        return ord(ch) - 48
    if ord(ch) > 0xFFFF or unicodedata.category(ch) != "Nd":
        return -1
    return unicodedata.decimal(ch)


def java_parse_integer(text: str, bits: int) -> int:
    """Integer.parseInt (bits 32) or Long.parseLong (bits 64) in radix 10; EvalAborted for what
    throws NumberFormatException there: no digits, another character, a value out of range."""
    negative = text[:1] == "-"
    start = 1 if text[:1] in ("-", "+") else 0
    if start == len(text):
        raise EvalAborted(f"{text[:40]!r} is not a number")
    limit = (1 << (bits - 1)) - (0 if negative else 1)
    value = 0
    for ch in text[start:]:
        digit = java_digit(ch)
        if digit < 0:
            raise EvalAborted(f"{text[:40]!r} is not an integer")
        value = value * 10 + digit
        if value > limit:
            raise EvalAborted(f"{text[:40]!r} is out of range")
    return -value if negative else value


def java_parse_double(text: str) -> float:
    """Double.valueOf: the decimal or hexadecimal forms Java reads, NaN and Infinity, after String.trim."""
    s = text.strip(_JAVA_TRIM)
    body = s[1:] if s[:1] in ("+", "-") else s
    negative = s[:1] == "-"
    if body in ("NaN", "Infinity"):
        value = float("nan") if body == "NaN" else float("inf")
        return -value if negative else value
    if body[:2] in ("0x", "0X"):
        return _parse_hex(s)
    m = _DECIMAL.fullmatch(s)
    if m is None:
        raise EvalAborted(f"{text[:40]!r} is not a number")
    return float(m.group(1) + m.group(2))  # both round the exact decimal value to the nearest double


def _parse_hex(s: str) -> float:
    m = _HEX.fullmatch(s)
    if m is None:
        raise EvalAborted(f"{s[:40]!r} is not a number")
    sign, mantissa, exp_sign, exp_digits = m.groups()
    negative = sign == "-"
    if len(exp_digits.lstrip("0")) > 9:  # FloatingDecimal: an exponent past int's range is infinity or zero
        value = float("inf") if exp_sign != "-" and mantissa.strip(".0") else 0.0
        return -value if negative else value
    try:
        value = float.fromhex(f"0x{mantissa}p{exp_sign}{exp_digits}")
    except OverflowError:
        value = float("inf")
    return -value if negative else value


def java_boolean(text: str) -> bool:
    """Boolean.valueOf(String): true for "true" in any case, false for anything else."""
    return len(text) == 4 and text.lower() == "true" and text.isascii()


def double_bits(x: float) -> int:
    """Double.doubleToLongBits: the IEEE bits as a signed long, every NaN the canonical one."""
    return _CANONICAL_NAN_BITS if x != x else _DOUBLE_BITS.unpack(struct.pack("<d", x))[0]


def double_compare(a: float, b: float) -> int:
    """Double.compare: numeric order, then -0.0 below 0.0 and NaN above everything (NaN equals NaN)."""
    if a < b:
        return -1
    if a > b:
        return 1
    x, y = double_bits(a), double_bits(b)
    return (x > y) - (x < y)


def string_compare(a: str, b: str) -> int:
    """String.compareTo's sign: the order of UTF-16 code units, a prefix first."""
    x, y = a.encode("utf-16-be", "surrogatepass"), b.encode("utf-16-be", "surrogatepass")
    return (x > y) - (x < y)


def java_equals(lv: Value, rv: Value) -> bool:
    """Object.equals of two non-null values: the same class and value (Double.equals by its bits)."""
    assert lv is not None and rv is not None
    if lv[0] != rv[0]:
        return False
    if lv[0] is JType.DOUBLE:
        return double_bits(float(lv[1])) == double_bits(float(rv[1]))
    return lv[1] == rv[1]


def convert(lv: Value, rv: Value) -> tuple[Value, Value] | int:
    """The two values of `compare` brought to one class as __compare brings them, or the answer it
    gives without comparing (-1: classes it does not convert); EvalAborted where Java throws."""
    assert lv is not None and rv is not None
    lt, rt = lv[0], rv[0]
    if lt == rt:
        return lv, rv
    if lt is JType.BOOL:
        if rt is JType.STRING:
            raise EvalAborted("a Boolean compared with a String (a ClassCastException in Java)")
        return -1
    if lt is JType.STRING:
        if rt is JType.BOOL:
            return (JType.BOOL, java_boolean(str(lv[1]))), rv
        return _from_string(str(lv[1]), rt), rv
    if rt is JType.STRING:
        return lv, _from_string(str(rv[1]), lt)
    if rt is JType.BOOL:
        return -1
    if JType.DOUBLE in (lt, rt):  # Integer or Long against Double: both as doubles
        return (JType.DOUBLE, float(lv[1])), (JType.DOUBLE, float(rv[1]))
    return (JType.LONG, lv[1]), (JType.LONG, rv[1])  # Integer against Long: both as longs


def _from_string(text: str, to: JType) -> Value:
    if to is JType.INT:
        return JType.INT, java_parse_integer(text, 32)
    if to is JType.LONG:
        return JType.LONG, java_parse_integer(text, 64)
    assert to is JType.DOUBLE, to
    return JType.DOUBLE, java_parse_double(text)


def compare(lv: Value, rv: Value) -> int:
    """ComparisonExpression.__compare of two non-null values: -1, 0 or 1 (or EvalAborted)."""
    converted = convert(lv, rv)
    if isinstance(converted, int):
        return converted
    left, right = converted
    assert left is not None and right is not None
    t, x, y = left[0], left[1], right[1]
    if t is JType.DOUBLE:
        return double_compare(float(x), float(y))
    if t is JType.STRING:
        return string_compare(str(x), str(y))
    return (int(x) > int(y)) - (int(x) < int(y))  # Integer, Long, Boolean (false < true)
