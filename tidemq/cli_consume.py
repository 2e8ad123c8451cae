"""`tidemq consume TOPIC`: print a topic's messages, from a position (`--from-beginning`,
`--offset N`, `--since TIME`; by default only what arrives from now on) or as a consumer group
(`--group G`: receive, print, ack).

Invariants: without `--follow` the command stops at the end of what is stored (pull: each queue
read up to the max offset it had when it was first pulled; group: the first receive that finds
nothing); with it, each queue is long-polled by its own task (one request each at a time) until
`--max-messages` are printed or the user interrupts. A group's messages are acked only after
they were written to stdout. Never more than `--max-messages` are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys

from tidemq.async_client import AsyncClient
from tidemq.cli_output import FORMATS, UsageError, write_messages
from tidemq.models import Message

# Messages asked for per pull and per receive: the API's default, which every broker takes (a larger
# `max` can exceed a broker's max_pull_messages, and its store returns 32 per pull by default anyway).
PULL_BATCH = 32
RECEIVE_BATCH = 32
# How long one long poll may be held by default (at most the broker's max_wait_ms, 30,000 by default).
FOLLOW_WAIT_MS = 10_000
# How long a received message stays invisible to the group before it would be delivered again.
INVISIBLE_MS = 30_000


def add_consume_command(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("consume", parents=[common], help="print a topic's messages (pull, or receive and ack as a group)")
    p.add_argument("topic")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", dest="from_beginning", action="store_true", help="from each queue's first message")
    start.add_argument("--offset", type=int, help="from this queue offset (in every queue, or in --queue)")
    start.add_argument("--since", help="from the first message stored at or after TIME (ISO 8601, or ms since the epoch)")
    start.add_argument("--group", help="consume as this group: the broker picks the messages; each is acked once printed")
    p.add_argument("--queue", type=int, help="only this queue (default: every queue of the topic)")
    p.add_argument("--tag", help="only messages with these tags (TagA||TagB)")
    p.add_argument("--max-messages", dest="max_messages", type=int, help="stop after printing this many")
    p.add_argument("--follow", "-f", action="store_true", help="keep waiting for new messages (long polls)")
    p.add_argument(
        "--wait-ms",
        dest="wait_ms",
        type=int,
        default=FOLLOW_WAIT_MS,
        help=f"with --follow: how long one long poll may wait (default {FOLLOW_WAIT_MS})",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="lines",
        help="lines: each body on a line (default); json: one object per line; raw: bodies back to back",
    )
    p.set_defaults(client_command=consume)


def parse_since(text: str) -> int:
    """ms since the epoch from an integer or an ISO 8601 time (UTC when it names no zone)."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since takes ms since the epoch or an ISO 8601 time, not {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


class Printer:
    """Writes messages to stdout and counts them against --max-messages."""

    def __init__(self, fmt: str, limit: int | None) -> None:
        self.fmt, self.left = fmt, limit
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
        write_messages(sys.stdout.buffer, messages, self.fmt)
        return messages


async def consume(client: AsyncClient, args: argparse.Namespace) -> int:
    if args.max_messages is not None and args.max_messages < 0:
        raise UsageError("--max-messages must be >= 0")
    if args.queue is not None and (args.queue < 0 or args.group):
        raise UsageError("--queue must be >= 0, and a group consumes every queue")
    if args.offset is not None and args.offset < 0:
        raise UsageError("--offset must be >= 0")
    if args.wait_ms < 0:
        raise UsageError("--wait-ms must be >= 0")
    printer = Printer(args.format, args.max_messages)
    if args.max_messages == 0:
        return 0
    if args.group:
        await consume_group(client, args, printer)
        return 0
    since = parse_since(args.since) if args.since else None
    queues = [args.queue] if args.queue is not None else [q.queue_id for q in (await client.topic(args.topic)).queues or []]
    tasks = [asyncio.create_task(consume_queue(client, args, q, since, printer)) for q in queues]
    try:
        await run_until_done(tasks, printer)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return 0


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


async def start_offset(client: AsyncClient, args: argparse.Namespace, queue: int, since: int | None) -> int:
    if args.offset is not None:
        return int(args.offset)
    if since is not None:
        return await client.offset_at(args.topic, queue, since)
    probe = await client.pull(args.topic, queue, 0, max_messages=1)
    return probe.min_offset if args.from_beginning else probe.max_offset


async def consume_queue(client: AsyncClient, args: argparse.Namespace, queue: int, since: int | None, printer: Printer) -> None:
    offset = await start_offset(client, args, queue, since)
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
