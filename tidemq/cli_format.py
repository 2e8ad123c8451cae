"""How `tidemq consume` (and `lookup`, `dlq list`) print messages: a named format (`lines`, `json`, `raw`)
or a format string with kcat's spellings.

A format string is printed once per message with these replaced: `%t` topic, `%p` queue, `%o` queue
offset, `%k` keys (space-separated, as RocketMQ's KEYS property holds them), `%K` the keys' length in
bytes, `%s` body, `%S` the body's length in bytes, `%T` store time (ms since the epoch), `%h`
properties (`name=value` joined by `,`), `%i` client message id, `%%` a `%`; and the escapes `\\n`,
`\\r`, `\\t`, `\\\\`. Any other `%x` or a `\\` before another character is a usage error, so a typo
shows at once instead of in the output. `%s` is the body's bytes as stored; the rest is UTF-8.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import BinaryIO

import orjson

from tidemq.cli_output import UsageError
from tidemq.models import Message

NAMED_FORMATS = ("lines", "json", "raw")
Piece = Callable[[Message], bytes]


def _text(value: object) -> bytes:
    return str(value).encode("utf-8")


FIELDS: dict[str, Piece] = {
    "t": lambda m: _text(m.topic),
    "p": lambda m: _text(m.queue_id),
    "o": lambda m: _text(m.queue_offset),
    "k": lambda m: _text(" ".join(m.keys)),
    "K": lambda m: _text(len(" ".join(m.keys).encode("utf-8"))),
    "s": lambda m: m.body,
    "S": lambda m: _text(len(m.body)),
    "T": lambda m: _text(m.store_timestamp),
    "h": lambda m: _text(",".join(f"{k}={v}" for k, v in m.properties.items())),
    "i": lambda m: _text(m.msg_id),
}
ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "\\": b"\\"}


def compile_format(text: str) -> Callable[[Message], bytes]:
    """A format string as a function of a message (UsageError for an unknown `%x` or escape)."""
    pieces: list[bytes | Piece] = []
    literal = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c in "%\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if c == "%" and nxt == "%":
                literal += b"%"
            elif c == "%" and nxt in FIELDS:
                pieces.append(bytes(literal))
                literal.clear()
                pieces.append(FIELDS[nxt])
            elif c == "\\" and nxt in ESCAPES:
                literal += ESCAPES[nxt]
            else:
                raise UsageError(f"the format has {c}{nxt}, which is none of %t %p %o %k %K %s %S %T %h %i %% \\n \\r \\t \\\\")
            i += 2
            continue
        if c in "%\\":
            raise UsageError(f"the format ends in a lone {c}")
        literal += c.encode("utf-8")
        i += 1
    pieces.append(bytes(literal))
    parts = [p for p in pieces if p != b""]

    def render(m: Message) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(m) for p in parts)

    return render


def message_printer(fmt: str) -> Callable[[Message], bytes]:
    """How one message is printed in the named format or the format string `fmt`."""
    if fmt == "json":
        return lambda m: orjson.dumps(m.to_json()) + b"\n"
    if fmt == "raw":
        return lambda m: m.body
    if fmt == "lines":
        return lambda m: m.body + b"\n"
    return compile_format(fmt)


def write_formatted(out: BinaryIO, messages: Iterable[Message], render: Callable[[Message], bytes]) -> int:
    """Print messages and flush, so a pipe sees them at once; returns how many."""
    chunks = [render(m) for m in messages]
    if chunks:
        out.write(b"".join(chunks))
        out.flush()
    return len(chunks)
