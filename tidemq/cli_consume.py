"""`tidemq consume TOPIC`: print a topic's messages, from a position (`-o beginning|end|N|-N|s@MS`, `--since`;
by default only what arrives from now on) or as a consumer group (`--group G`: receive, print, ack).

The options take kcat's spellings where kcat has one: `-o` offsets, `-p` queue (kcat's partition), `-c`
count, `-f` format string (tidemq.cli_format), `-J` JSON lines with metadata.

Invariants: without `--follow` the command stops at the end of what is stored (pull: each queue
read up to the max offset it had when it was first pulled; group: the first receive that finds
nothing); with it, each queue is long-polled by its own task (one request each at a time) until
`--max-messages` are printed or the user interrupts. A group's messages are acked only after
they were written to stdout. Never more than `--max-messages` are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass

from tidemq.async_client import AsyncClient
from tidemq.cli_format import message_printer, write_formatted
from tidemq.cli_output import UsageError
from tidemq.cli_progress import Progress, rate_text
from tidemq.cli_time import parse_time
from tidemq.models import Message

# Messages asked for per pull and per receive: the API's default, which every broker takes (a larger
# `max` can exceed a broker's max_pull_messages, and its store returns 32 per pull by default anyway).
PULL_BATCH = 32
RECEIVE_BATCH = 32
# How long one long poll may be held by default (at most the broker's max_wait_ms, 30,000 by default).
FOLLOW_WAIT_MS = 10_000
# How long a received message stays invisible to the group before it would be delivered again.
INVISIBLE_MS = 30_000
FORMAT_HELP = (
    "lines (each body on a line; the default), json (one object per line, with topic, queue, offset, keys, tags, "
    "properties, times), raw (bodies back to back), or a format string: %%t topic, %%p queue, %%o offset, %%k keys, "
    "%%s body, %%S its size, %%T store time (ms), %%h properties, %%i message id, \\n \\t (e.g. '%%k %%s\\n')"
)


@dataclass(frozen=True, slots=True)
class Start:
    """Where each queue is read from: an absolute offset, N back from the end, the first or last message, a time."""

    kind: str  # "offset", "back", "beginning", "end", "time"
    value: int = 0


def parse_start(text: str) -> Start:
    """kcat's -o: beginning, end, N (an offset), -N (N before the end), s@MS (the first stored at or after MS)."""
    if text == "beginning":
        return Start("beginning")
    if text == "end":
        return Start("end")
    if text.startswith("s@") and text[2:].isdigit():
        return Start("time", int(text[2:]))
    if text.isdigit():
        return Start("offset", int(text))
    if text.startswith("-") and text[1:].isdigit():
        return Start("back", int(text[1:]))
    raise UsageError(f"-o/--offset takes beginning, end, N, -N (N before the end) or s@MS, not {text!r}")


def add_consume_command(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("consume", parents=[common], help="print a topic's messages (pull, or receive and ack as a group)")
    p.add_argument("topic")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", dest="from_beginning", action="store_true", help="from each queue's first message")
    start.add_argument(
        "-o", "--offset", help="where to start in each queue (or in --queue): beginning, end, N, -N (N before the end), s@MS"
    )
    start.add_argument("--since", help="from the first message stored at or after TIME: 10m, 1h30m, 2d back from now, ISO 8601, or ms")
    start.add_argument("--group", help="consume as this group: the broker picks the messages; each is acked once printed")
    p.add_argument("-p", "--queue", type=int, help="only this queue (default: every queue of the topic)")
    p.add_argument("--tag", help="only messages with these tags (TagA||TagB)")
    p.add_argument("-c", "--max-messages", dest="max_messages", type=int, help="stop after printing this many")
    p.add_argument("--follow", action="store_true", help="keep waiting for new messages (long polls)")
    p.add_argument(
        "--wait-ms",
        dest="wait_ms",
        type=int,
        default=FOLLOW_WAIT_MS,
        help=f"with --follow: how long one long poll may wait (default {FOLLOW_WAIT_MS})",
    )
    p.add_argument("-f", "--format", default="lines", help=FORMAT_HELP)
    p.add_argument("-J", dest="format", action="store_const", const="json", help="JSON lines with metadata (as --format json)")
    p.add_argument("--progress", action="store_true", help="a line on stderr every second (messages, rate) and a summary at the end")
    p.set_defaults(client_command=consume)


class Printer:
    """Writes messages to stdout and counts them against --max-messages."""

    def __init__(self, render: Callable[[Message], bytes], limit: int | None, progress: Progress) -> None:
        self.render, self.left, self.progress = render, limit, progress
        self.done = asyncio.Event()

    def room(self, wanted: int) -> int:
        return wanted if self.left is None else min(wanted, self.left)

    def write(self, messages: list[Message]) -> list[Message]:
        """Prints what fits under the limit; returns what was printed."""
        if self.left is not None:
            messages = messages[: self.left]
            self.left -= len(messages)
            if self.left <= 0:
                self.done.set()
        write_formatted(sys.stdout.buffer, messages, self.render)
        self.progress.add(len(messages))
        return messages


def check(args: argparse.Namespace) -> Start:
    if args.max_messages is not None and args.max_messages < 0:
        raise UsageError("--max-messages must be >= 0")
    if args.queue is not None and (args.queue < 0 or args.group):
        raise UsageError("--queue must be >= 0, and a group consumes every queue")
    if args.wait_ms < 0:
        raise UsageError("--wait-ms must be >= 0")
    if args.from_beginning:
        return Start("beginning")
    if args.offset is not None:
        return parse_start(args.offset)
    if args.since is not None:
        return Start("time", parse_time(args.since, "--since"))
    return Start("end")


async def consume(client: AsyncClient, args: argparse.Namespace) -> int:
    start = check(args)
    progress = Progress("consumed", args.progress)
    printer = Printer(message_printer(args.format), args.max_messages, progress)
    if args.max_messages == 0:
        return 0
    try:
        if args.group:
            await consume_group(client, args, printer)
        else:
            await consume_queues(client, args, start, printer)
    finally:
        progress.finish()
        if args.progress:
            elapsed = progress.elapsed_s()
            print(
                f"tidemq: consumed {progress.count:,} messages in {elapsed:.1f} s ({rate_text(progress.count, elapsed)})", file=sys.stderr
            )
    return 0


async def consume_queues(client: AsyncClient, args: argparse.Namespace, start: Start, printer: Printer) -> None:
    queues = [args.queue] if args.queue is not None else [q.queue_id for q in (await client.topic(args.topic)).queues or []]
    tasks = [asyncio.create_task(consume_queue(client, args, q, start, printer)) for q in queues]
    try:
        await run_until_done(tasks, printer)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_until_done(tasks: list[asyncio.Task[None]], printer: Printer) -> None:
    """Until every queue's task ended or enough messages were printed; a task's failure is raised."""
    stopper = asyncio.create_task(printer.done.wait())
    pending: set[asyncio.Future[object]] = {*tasks, stopper}  # type: ignore[arg-type]  # Task[None] and Task[bool] in one set to wait on
    try:
        while stopper in pending and pending - {stopper}:
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in finished:
                if t is not stopper and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]  # checked not None on the line above
    finally:
        stopper.cancel()


async def start_offset(client: AsyncClient, topic: str, queue: int, start: Start) -> int:
    if start.kind == "offset":
        return start.value
    if start.kind == "time":
        return await client.offset_at(topic, queue, start.value)
    probe = await client.pull(topic, queue, 0, max_messages=1)
    if start.kind == "beginning":
        return probe.min_offset
    if start.kind == "back":
        return max(probe.min_offset, probe.max_offset - start.value)
    return probe.max_offset


async def consume_queue(client: AsyncClient, args: argparse.Namespace, queue: int, start: Start, printer: Printer) -> None:
    offset = await start_offset(client, args.topic, queue, start)
    end: int | None = None
    while not printer.done.is_set():
        wait_ms = args.wait_ms if args.follow else 0
        got = await client.pull(args.topic, queue, offset, max_messages=printer.room(PULL_BATCH), wait_ms=wait_ms, tag=args.tag)
        printer.write(got.messages)
        end = got.max_offset if end is None else end
        if not args.follow and (got.next_offset >= end or got.next_offset == offset):
            return
        offset = got.next_offset


async def consume_group(client: AsyncClient, args: argparse.Namespace, printer: Printer) -> None:
    while not printer.done.is_set():
        wait_ms = args.wait_ms if args.follow else 0
        got = await client.receive(
            args.group, args.topic, max_messages=printer.room(RECEIVE_BATCH), invisible_ms=INVISIBLE_MS, wait_ms=wait_ms, tag=args.tag
        )
        if not got and not args.follow:
            return
        printed = printer.write(got)
        if printed:
            await client.ack(args.group, args.topic, [m.receipt_handle for m in printed if m.receipt_handle])
