"""The progress line long client commands write on stderr: messages so far and the rate, at most once a
second, rewritten in place on a terminal (one line per report otherwise), and a summary at the end."""

from __future__ import annotations

import sys
import time
from typing import TextIO

# Seconds between two progress lines.
REPORT_EVERY_S = 1.0


def rate_text(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s" if seconds > 0 else "-"


class Progress:
    def __init__(self, verb: str, enabled: bool, out: TextIO | None = None) -> None:
        self.verb = verb  # "sent", "consumed"
        self.enabled = enabled
        self.out = out if out is not None else sys.stderr
        self.count = 0
        self.started = time.monotonic()
        self.reported = self.started
        self.in_place = self.out.isatty()
        self.shown = False

    def add(self, n: int) -> None:
        self.count += n
        now = time.monotonic()
        if self.enabled and now - self.reported >= REPORT_EVERY_S:
            self.reported = now
            line = f"tidemq: {self.count:,} messages {self.verb}, {rate_text(self.count, now - self.started)}"
            self.out.write(f"\r{line}\x1b[K" if self.in_place else line + "\n")
            self.out.flush()
            self.shown = True

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def finish(self) -> None:
        """End an in-place line, so what is written next starts on a line of its own."""
        if self.shown and self.in_place:
            self.out.write("\n")
            self.out.flush()
