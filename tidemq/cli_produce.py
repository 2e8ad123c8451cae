"""`tidemq produce TOPIC [FILE ...]`: one message per line of stdin, or one per file (`--lines`:
one per line of the files), sent in binary batches of up to `--batch` messages.

kcat's spellings where kcat has one: `-k KEY` a key of every message, `-K DELIM` each line is
`key DELIM body` (split at the first DELIM; a line without it has no key of its own), `-H name=value`
a property of every message, `-p N` the queue (kcat's partition), `-l` each line of the files.

Invariants: messages keep their order (one request at a time); a batch is sent as soon as it is
full or stdin has nothing more ready, so `tail -f log | tidemq produce t` delivers each line
promptly; empty lines are skipped; at most `--batch` messages and one `MAX_LINE_BYTES` partial
line are held. A broker that does not take binary batches (415) gets JSON batches instead. On a
terminal a progress line (messages, rate) is kept on stderr once a run passes a second.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Iterator
from pathlib import Path

from tidemq.async_client import AsyncClient
from tidemq.batch_codec import BatchMessage
from tidemq.cli_output import UsageError
from tidemq.cli_progress import Progress, rate_text
from tidemq.errors import ProblemError

# Most messages one request may carry (the broker's default max_batch_messages).
MAX_BATCH = 1000
DEFAULT_BATCH = 100
# The longest line held while waiting for its end (the broker's default max message size is 4 MiB).
MAX_LINE_BYTES = 4 * 1024 * 1024
READ_BYTES = 64 * 1024


def add_produce_command(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("produce", parents=[common], help="send messages: one per line of stdin, or one per file")
    p.add_argument("topic")
    p.add_argument("files", nargs="*", type=Path, help="send each file as one message (default: each line of stdin)")
    p.add_argument("-l", "--lines", action="store_true", help="with files: send each line of them as a message")
    p.add_argument("-k", "--key", dest="keys", action="append", default=[], help="a key of every message (repeat for several)")
    p.add_argument("-K", "--key-delimiter", dest="key_delimiter", help="each line is KEY<DELIM>BODY: split at the first DELIM (e.g. -K :)")
    p.add_argument(
        "-H", "--property", dest="properties", action="append", default=[], metavar="NAME=VALUE", help="a property of every message"
    )
    p.add_argument("--tag", help="the tag of every message")
    p.add_argument("-p", "--queue", type=int, help="the queue to put into (default: round-robin, one queue per batch)")
    p.add_argument("--delay-ms", dest="delay_ms", type=int, help="deliver the messages this many ms from now")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=f"messages per request, 1..{MAX_BATCH} (default {DEFAULT_BATCH})")
    p.add_argument("-q", "--quiet", action="store_true", help="print no summary or progress on stderr")
    p.add_argument("--progress", action="store_true", help="a progress line every second even when stderr is not a terminal")
    p.set_defaults(client_command=produce)


def check(args: argparse.Namespace) -> None:
    if not 1 <= args.batch <= MAX_BATCH:
        raise UsageError(f"--batch must be in 1..{MAX_BATCH}")
    if args.queue is not None and args.queue < 0:
        raise UsageError("--queue must be >= 0")
    if args.delay_ms is not None and args.delay_ms < 0:
        raise UsageError("--delay-ms must be >= 0")
    if args.lines and not args.files:
        raise UsageError("--lines needs files (stdin is always read line by line)")
    for key in args.keys:
        check_key(key, "a key")
    if args.key_delimiter == "":
        raise UsageError("-K needs a delimiter")
    if args.key_delimiter is not None and args.files and not args.lines:
        raise UsageError("-K splits lines: give --lines with files")
    args.property_map = parse_properties(args.properties)


def check_key(key: str, where: str) -> None:
    if not key or " " in key or "," in key:
        raise UsageError(f"{where} is non-empty and has no space or comma: {key!r}")


def parse_properties(items: list[str]) -> dict[str, str]:
    """-H name=value pairs; the broker refuses reserved names (KEYS, TAGS, ...) with PROPERTIES_INVALID."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"-H takes name=value, not {item!r}")
        out[name] = value
    return out


class Sender:
    """Sends batches with the command's options; binary batches until the broker refuses them."""

    def __init__(self, client: AsyncClient, args: argparse.Namespace, progress: Progress) -> None:
        self.client, self.args, self.progress = client, args, progress
        self.binary = True
        self.sent = 0

    def message(self, data: bytes) -> BatchMessage:
        """A line or a file as a message: its key split off with -K, the command's keys, tag and properties."""
        a = self.args
        keys = list(a.keys)
        if a.key_delimiter is not None:
            key, sep, body = data.partition(a.key_delimiter.encode("utf-8"))
            if sep:
                data = body
                if key:
                    text = key.decode("utf-8", errors="replace")
                    check_key(text, f"the key of line {self.sent + 1}")
                    keys.append(text)
        return BatchMessage(data, a.tag, keys, properties=dict(a.property_map))

    async def send(self, bodies: list[bytes]) -> None:
        a = self.args
        messages = [self.message(b) for b in bodies]
        if len(messages) == 1:
            m = messages[0]
            await self.client.produce(
                a.topic, m.body, tags=m.tags, keys=m.keys, queue_id=a.queue, delay_ms=a.delay_ms, properties=m.properties or None
            )
        else:
            if self.binary:
                try:
                    await self.client.produce_binary(a.topic, messages, a.queue, delay_ms=a.delay_ms)
                    self.count(len(messages))
                    return
                except ProblemError as e:
                    if e.code != "UNSUPPORTED_MEDIA_TYPE":
                        raise
                    self.binary = False
            await self.client.produce_batch(a.topic, messages, a.queue, a.delay_ms)
        self.count(len(messages))

    def count(self, n: int) -> None:
        self.sent += n
        self.progress.add(n)


async def produce(client: AsyncClient, args: argparse.Namespace) -> int:
    check(args)
    progress = Progress("sent", not args.quiet and (args.progress or sys.stderr.isatty()))
    sender = Sender(client, args, progress)
    try:
        if not args.files:
            for batch in line_batches(sys.stdin.fileno(), args.batch):
                await sender.send(batch)
        for path in args.files:
            try:
                if args.lines:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        for batch in line_batches(fd, args.batch):
                            await sender.send(batch)
                    finally:
                        os.close(fd)
                else:
                    await sender.send([path.read_bytes()])
            except OSError as e:
                raise UsageError(f"cannot read {path}: {e.strerror}") from e
    finally:
        progress.finish()
    if not args.quiet:
        elapsed = progress.elapsed_s()
        rate = f" in {elapsed:.1f} s ({rate_text(sender.sent, elapsed)})" if elapsed >= 1.0 else ""
        print(f"tidemq: produced {sender.sent} message{'s' if sender.sent != 1 else ''} to {args.topic}{rate}", file=sys.stderr)
    return 0


def _ready_now(fd: int) -> bool:
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def line_batches(fd: int, batch: int) -> Iterator[list[bytes]]:
    """The non-empty lines read from `fd` (without their newline), in batches of at most `batch`;
    a partial batch is handed out whenever nothing more is ready to read."""
    pending = b""
    lines: list[bytes] = []
    while chunk := os.read(fd, READ_BYTES):
        *complete, pending = (pending + chunk).split(b"\n")
        if len(pending) > MAX_LINE_BYTES:
            raise UsageError(f"a line is longer than {MAX_LINE_BYTES} bytes")
        for line in complete:
            if line:
                lines.append(line)
            if len(lines) >= batch:
                yield lines
                lines = []
        if lines and not _ready_now(fd):
            yield lines
            lines = []
    if pending:
        lines.append(pending)
    if lines:
        yield lines
