"""The client commands' format strings and times, as functions (the commands run them in tests/client/test_cli.py)."""

from __future__ import annotations

import pytest

from tidemq.cli_format import compile_format, message_printer
from tidemq.cli_output import UsageError
from tidemq.cli_time import duration_ms, parse_time
from tidemq.models import Message

MESSAGE = Message(
    msg_id="ID-1", offset_msg_id="7F", topic="orders", queue_id=2, queue_offset=41, commitlog_offset=0, body=b"\xffbody",
    tags="paid", keys=["k1", "k2"], properties={"region": "eu", "tier": "1"}, born_timestamp=1, store_timestamp=1767225600123,
)  # fmt: skip


def test_a_format_string_has_kcats_fields_and_escapes() -> None:
    render = compile_format("%t/%p@%o [%k|%K] %s (%S) %T {%h} %i 100%%\\t\\n")
    assert render(MESSAGE) == b"orders/2@41 [k1 k2|5] \xffbody (5) 1767225600123 {region=eu,tier=1} ID-1 100%\t\n"
    assert message_printer("lines")(MESSAGE) == b"\xffbody\n" and message_printer("raw")(MESSAGE) == b"\xffbody"
    assert message_printer("json")(MESSAGE).startswith(b'{"msg_id":"ID-1"')


@pytest.mark.parametrize("bad", ["%x", "trailing %", "\\q", "end \\"])
def test_an_unknown_field_or_escape_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError):
        compile_format(bad)


def test_times_are_durations_back_from_now_iso_times_or_ms() -> None:
    assert duration_ms("10m") == 600_000 and duration_ms("1h30m") == 5_400_000 and duration_ms("500ms") == 500
    assert duration_ms("2d") == 172_800_000 and duration_ms("10") is None and duration_ms("m10") is None
    assert parse_time("10m", "--since", now_ms=1_000_000) == 400_000
    assert parse_time("1767225600000", "--since") == 1767225600000
    assert parse_time("2026-01-01T00:00:00", "--since") == 1767225600000  # UTC unless a zone is named
    assert parse_time("2026-01-01T01:00:00+01:00", "--since") == 1767225600000
    with pytest.raises(UsageError, match="--since"):
        parse_time("yesterday", "--since")
