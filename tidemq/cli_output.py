"""What the client commands share: their usage error and how they print messages and tables."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO

import orjson

from tidemq.models import Message

FORMATS = ("lines", "json", "raw")


class UsageError(Exception):
    """Options that cannot work together (exit status 2)."""


def write_messages(out: BinaryIO, messages: Iterable[Message], fmt: str) -> int:
    """Print messages as `fmt` (lines: each body and a newline; json: one object per line; raw: the
    bodies' bytes back to back) and flush, so a pipe sees them at once; returns how many."""
    count = 0
    chunks: list[bytes] = []
    for m in messages:
        if fmt == "json":
            chunks.append(orjson.dumps(m.to_json()) + b"\n")
        elif fmt == "raw":
            chunks.append(m.body)
        else:
            chunks.append(m.body + b"\n")
        count += 1
    if chunks:
        out.write(b"".join(chunks))
        out.flush()
    return count


def print_json(value: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.buffer.flush()


def print_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Columns padded to their widest cell, like `kcat -L` lists."""
    cells = [list(header)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
