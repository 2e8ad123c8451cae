"""Times the client commands take: `--since 10m` (a duration back from now), `--since 2026-01-02T03:04:05`
(ISO 8601, UTC unless it names a zone) or ms since the epoch."""

from __future__ import annotations

import datetime
import re
import time

from tidemq.cli_output import UsageError

UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w)")


def duration_ms(text: str) -> int | None:
    """`90s`, `10m`, `1h30m`, `2d`, `500ms` in ms; None when `text` is not a duration."""
    parts = DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * UNIT_MS[u] for n, u in parts)


def parse_time(text: str, option: str, now_ms: int | None = None) -> int:
    """ms since the epoch from a duration back from now, an ISO 8601 time or ms since the epoch."""
    back = duration_ms(text)
    if back is not None:
        return (now_ms if now_ms is not None else int(time.time() * 1000)) - back
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{option} takes a duration back from now (10m, 1h30m, 2d), an ISO 8601 time or ms since the epoch, not {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)
