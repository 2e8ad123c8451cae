"""What the client commands share: their usage error and how they print JSON and tables (messages:
tidemq.cli_format)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from tidemq.errors import TidemqClientError


class UsageError(TidemqClientError):
    """Raised when command-line options cannot work together (exit status 2)."""

    def __init__(self, detail: str) -> None:
        super().__init__("USAGE", None, detail)


def print_json(value: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.buffer.flush()


def print_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Columns padded to their widest cell, like `kcat -L` lists."""
    cells = [list(header)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
