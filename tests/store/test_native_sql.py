"""The native SQL92 evaluator (store/_native/sql.c) against the reference (store.filter.sql_eval), and the
SQL-filtered pull (the gather kernel) against store.queue.reference_getter on real stores.

Random expressions come from the grammar (every operator, literals of every class, properties
that may be missing); random properties hold numbers in every form Java reads or refuses, digits
outside ASCII, hexadecimal floats, long numbers, repeated names and bytes that are not UTF-8.
The kernel must give the reference's outcome, or leave the message to it (DEFER) only for what it
does not decide itself; programs whose bytes are damaged are refused, never evaluated.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from store import FilterInvalid, GetMessageStatus, MessageFilter, SqlFilter, TagFilter, build_message
from store.codec.message import decode_properties
from store.filter.sql_eval import evaluate
from store.filter.sql_parser import Node, Op
from store.filter.sql_program import CONSTANT, HEADER, NODE
from store.filter.sql_values import TRUE, EvalAborted, JType
from store.native import SqlOutcome, sql_eval
from store.queue.reference_getter import ReferenceGetter
from tests.store.conftest import open_store, small_config, wait_dispatched

NAMES = ["a", "b", "c", "TAGS"]
VALUES = [
    "0", "5", "-5", "+5", "05", "2147483647", "2147483648", "-2147483649", "9223372036854775808", "5.0", " 5 ", "5d", "1e3",
    ".5", "NaN", "Infinity", "-0.0", "0x1p3", "true", "TRUE", "x", "axb", "", "é", "٣", "1" * 300, "1e-400", "'",
]  # fmt: skip
LITERALS = ["1", "5", "2147483648", "1.5", "5.0", "1E3", "'x'", "'5'", "'axb'", "''", "'é'", "TRUE", "FALSE", "NULL", "-5", "-1.5"]

value_text = st.one_of(
    st.sampled_from(VALUES), st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), max_size=6)
)


def expressions() -> st.SearchStrategy[str]:
    """Text of expressions in the grammar; some are refused by the parser's checks (the tests assume them away)."""
    operand = st.one_of(st.sampled_from(NAMES), st.sampled_from(LITERALS), st.sampled_from(NAMES).map(lambda n: "-" + n))
    string = st.sampled_from(["'x'", "'5'", "''", "'a'", "'é'"])
    comparison = st.one_of(
        st.tuples(operand, st.sampled_from(["=", "<>", ">", ">=", "<", "<="]), operand).map(" ".join),
        st.tuples(operand, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join),
        st.tuples(operand, st.sampled_from(["BETWEEN", "NOT BETWEEN"]), operand, operand).map(lambda t: f"{t[0]} {t[1]} {t[2]} AND {t[3]}"),
        st.tuples(st.sampled_from(NAMES), st.sampled_from(["IN", "NOT IN"]), st.lists(string, min_size=1, max_size=3)).map(
            lambda t: f"{t[0]} {t[1]} ({', '.join(t[2])})"
        ),
        st.tuples(
            operand, st.sampled_from(["CONTAINS", "NOT CONTAINS", "STARTSWITH", "NOT STARTSWITH", "ENDSWITH", "NOT ENDSWITH"]), string
        ).map(" ".join),  # fmt: skip
        st.sampled_from(NAMES + ["TRUE", "FALSE", "NULL"]),
    )
    return st.recursive(
        comparison,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(" ".join),
            inner.map(lambda e: f"NOT ({e})"),
            inner.map(lambda e: f"({e})"),
            st.tuples(inner, st.sampled_from(["= TRUE", "= FALSE", "IS NULL", "= 1", "= 'x'"])).map(lambda t: f"({t[0]}) {t[1]}"),
        ),
        max_leaves=6,
    )


def parsed(text: str) -> SqlFilter:
    try:
        return SqlFilter.parse(text)
    except FilterInvalid:
        assume(False)
        raise


def reference_outcome(f: SqlFilter, props: dict[str, str]) -> SqlOutcome:
    try:
        value = evaluate(f.tree, props)
    except EvalAborted:
        return SqlOutcome.ABORTED
    return SqlOutcome.UNKNOWN if value is None else SqlOutcome.TRUE if value == TRUE else SqlOutcome.FALSE


def deferrable(f: SqlFilter, raw: bytes) -> bool:
    """Whether the kernel may leave these properties to the reference: a named value (or a string literal,
    which a comparison with a number converts too) that is not UTF-8, or one with characters outside
    ASCII, a hexadecimal float or more than 256 characters."""
    for n in walk(f.tree):
        if n.op.name == "CONST" and n.value is not None and isinstance(n.value[1], str):
            text = n.value[1]
            if not text.isascii() or "0x" in text.lower() or len(text) > 256:
                return True
    named = {n.name for n in walk(f.tree) if n.op.name == "PROP"}
    for item in raw.split(b"\x02"):
        name, sep, value = item.partition(b"\x01")
        if sep and name.decode("utf-8", "replace") in named:
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                return True
            if not text.isascii() or "0x" in text.lower() or len(text) > 256:
                return True
    return False


def walk(node: Node) -> Iterator[Node]:
    yield node
    for a in node.args:
        yield from walk(a)


def same_outcome(f: SqlFilter, raw: bytes) -> None:
    got = sql_eval(f.program, raw)
    want = reference_outcome(f, decode_properties(raw))
    if got is SqlOutcome.DEFER:
        assert deferrable(f, raw), (f.expression, raw)
    else:
        assert got is want, (f.expression, raw, got, want)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(expressions(), st.dictionaries(st.sampled_from(NAMES), value_text, max_size=4))
def test_the_kernel_gives_the_reference_outcome(text: str, props: dict[str, str]) -> None:
    same_outcome(parsed(text), "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode())


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(expressions(), st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"", b"a\xff"]), st.binary(max_size=6)), max_size=5),
       st.booleans())  # fmt: skip
def test_raw_properties_repeated_names_and_invalid_utf8(text: str, items: list[tuple[bytes, bytes]], trailing: bool) -> None:
    raw = b"\x02".join(n + b"\x01" + v.replace(b"\x01", b"").replace(b"\x02", b"") for n, v in items) + (b"\x02" if trailing else b"")
    same_outcome(parsed(text), raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(expressions(), st.data())
def test_a_damaged_program_is_refused_never_read_outside_itself(text: str, data: st.DataObject) -> None:
    program = bytearray(parsed(text).program)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(program) - 1))
        program[at] = data.draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, program[at] ^ 1, program[at] + 1 & 0xFF]))
    cut = data.draw(st.sampled_from([len(program), len(program) - 1, 21]))
    try:
        outcome = sql_eval(bytes(program[:cut]), b"a\x015\x02b\x01x\x02")
    except ValueError:
        return
    assert outcome in SqlOutcome


def test_programs_are_checked_against_their_bounds() -> None:
    with pytest.raises(ValueError):
        sql_eval(b"", b"")
    with pytest.raises(ValueError):
        sql_eval(SqlFilter.parse("a = 1").program + b"\x00", b"")
    with pytest.raises(ValueError, match="deeper"):
        sql_eval(not_chain(65), b"")
    assert sql_eval(not_chain(64), b"") is SqlOutcome.FALSE  # TRUE under 63 NOTs


def not_chain(depth: int) -> bytes:
    """A program made by hand, deeper than any the parser makes: NOT of NOT ... of TRUE, `depth` levels."""
    nodes = [NODE.pack(Op.CONST, 0, 0, 0)] + [NODE.pack(Op.NOT, i, 0, 0) for i in range(depth - 1)]
    return HEADER.pack(depth, 0, 1, 0, 0) + b"".join(nodes) + CONSTANT.pack(JType.BOOL, 0, 1)


# The filtered pull against the reference getter on real stores ---------------------------------

TOPIC = "S"
# Small files (pulls cross commitlog and consume-queue files), no timer wheel (pulls never read it).
PULL_STORE = {"mapped_file_size_commit_log_bytes": 16384, "max_message_size_bytes": 2048, "max_properties_size_bytes": 2048,
              "mapped_file_size_consume_queue_bytes": 20 * 16, "timer_wheel_enable": False}  # fmt: skip
MESSAGE_VALUES = ["1", "5", "12", "x", "٣", "0x1p2", "2147483648", "1" * 300, "-0.5", "true", "a b"]


@st.composite
def filled(draw: st.DrawFn) -> list[tuple[str | None, dict[str, str], int]]:
    props = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(MESSAGE_VALUES), max_size=3)
    return draw(st.lists(st.tuples(st.sampled_from([None, "t1", "t2"]), props, st.sampled_from([1, 10, 600])), min_size=1, max_size=40))


FILTERS = [
    "a > 4", "a = 5 OR b = 'x'", "a BETWEEN 2 AND 12", "a IS NULL", "b IN ('x', 'true')", "c CONTAINS '1'", "NOT (a > 4)",
    "a = 3", "a > b", "c NOT STARTSWITH 'a'", "a = 4.0",
]  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(filled(), st.sampled_from(FILTERS), st.sampled_from([None, "t1"]), st.integers(1, 40), st.integers(0, 10))
def test_a_filtered_pull_matches_the_reference(
    messages: list[tuple[str | None, dict[str, str], int]], expression: str, tag: str | None, max_count: int, offset: int
) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = open_store(small_config(root, **PULL_STORE))
        try:
            store.topic_config_manager.create_or_update(TOPIC, 1)
            for t, props, size in messages:
                assert store.put_message(build_message(TOPIC, b"x" * size, 0, tags=t, properties=props)).ok
            wait_dispatched(store)
            message_filter = MessageFilter(TagFilter.parse(tag), SqlFilter.parse(expression))
            reference = ReferenceGetter(store.config, store.commit_log, store.stats, store.find_consume_queue)
            start = offset % (len(messages) + 1)
            while True:
                with store.get_message("g", TOPIC, 0, start, max_count, message_filter) as got:
                    answer = (got.status, got.next_begin_offset, bytes(got.data), got.queue_offsets)
                with reference.get_message("g", TOPIC, 0, start, max_count, message_filter) as want:
                    assert answer == (want.status, want.next_begin_offset, bytes(want.data), want.queue_offsets)
                if got.status not in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE) or got.next_begin_offset <= start:
                    break
                start = got.next_begin_offset
        finally:
            store.shutdown()
