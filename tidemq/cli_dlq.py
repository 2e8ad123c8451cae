"""`tidemq dlq list|resend|redrive GROUP`: a group's dead letters (the messages `%DLQ%{group}` holds after the
group's max_reconsume_times redeliveries).

`list` prints them as `consume` prints messages. `resend` sends chosen ones back to the group (copies into its
retry topic, reconsume times 0: POST /v1/groups/{group}/dead-letters/resend, synchronous). `redrive` moves every
one back in the background (docs/http-api.md, "Dead-letter redrive") and shows the progress: `--wait` polls it
until it is done (every `--poll-ms`, at most `--wait-s`); exit status 1 with the broker's problem when it refuses
(409 REDRIVE_RUNNING: one runs already), 4 when the wait ends before the redrive does; `--status` only shows the
group's latest redrive.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from tidemq.async_client import AsyncClient
from tidemq.cli_consume import FORMAT_HELP
from tidemq.cli_format import message_printer, write_formatted
from tidemq.cli_output import UsageError, print_json, print_table
from tidemq.errors import NotFound, TidemqClientError

# How long `redrive --wait` waits by default, and how often it asks.
DEFAULT_WAIT_S = 300.0
DEFAULT_POLL_MS = 200
# Dead letters sent back per request (the broker takes at most 1,000).
RESEND_BATCH = 500
PULL_BATCH = 32
DLQ_PREFIX = "%DLQ%"
# Dead letters listed by default: the offset, the properties (RETRY_TOPIC: where it came from), the body.
DEFAULT_FORMAT = "%o\\t%h\\t%s\\n"


class RedriveNotDone(TidemqClientError):
    """Raised when `--wait` ended before the redrive was done."""

    def __init__(self, detail: str) -> None:
        super().__init__("REDRIVE_NOT_DONE", None, detail)


def add_dlq_command(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    dlq = commands.add_parser("dlq", help="a consumer group's dead letters: list, resend, redrive")
    actions = dlq.add_subparsers(dest="dlq_action", required=True)
    listing = actions.add_parser("list", parents=[common], help="print a group's dead letters")
    listing.add_argument("group")
    listing.add_argument("-f", "--format", default=DEFAULT_FORMAT, help=FORMAT_HELP + "; default '%%o\\t%%h\\t%%s\\n'")
    listing.add_argument("-J", dest="format", action="store_const", const="json", help="JSON lines (as --format json)")
    listing.set_defaults(client_command=list_command)
    resend = actions.add_parser("resend", parents=[common], help="send chosen dead letters back to the group")
    resend.add_argument("group")
    resend.add_argument("offsets", nargs="*", type=int, help="the dead letters' offsets (from list)")
    resend.add_argument("--all", action="store_true", help="every dead letter kept")
    resend.set_defaults(client_command=resend_command)
    redrive = actions.add_parser("redrive", parents=[common], help="move a group's dead letters back to be received again")
    redrive.add_argument("group")
    redrive.add_argument("--max-messages", dest="max_messages", type=int, help="move at most this many (default: every one)")
    redrive.add_argument("--status", action="store_true", help="only show the group's latest redrive")
    redrive.add_argument("--wait", action="store_true", help="wait until the redrive is done, then show it")
    redrive.add_argument("--wait-s", dest="wait_s", type=float, default=DEFAULT_WAIT_S, help="longest --wait (default 300)")
    redrive.add_argument("--poll-ms", dest="poll_ms", type=int, default=DEFAULT_POLL_MS, help="how often --wait asks (default 200)")
    redrive.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or json")
    redrive.set_defaults(client_command=redrive_command)


async def _dead_letter_queue(client: AsyncClient, group: str) -> tuple[int, int] | None:
    """The dead-letter queue's (min offset, max offset); None when the group has no dead-letter topic."""
    topic = DLQ_PREFIX + group
    try:
        info = await client.topic(topic)
    except NotFound:
        print(f"tidemq: group {group} has no dead letters ({topic} does not exist)", file=sys.stderr)
        return None
    (queue,) = info.queues or []
    return queue.min_offset, queue.max_offset


async def list_command(client: AsyncClient, args: argparse.Namespace) -> int:
    bounds = await _dead_letter_queue(client, args.group)
    if bounds is None:
        return 0
    render = message_printer(args.format)
    offset, end = bounds
    while offset < end:
        got = await client.pull(DLQ_PREFIX + args.group, 0, offset, max_messages=PULL_BATCH)
        write_formatted(sys.stdout.buffer, got.messages, render)
        if got.next_offset <= offset:
            break
        offset = got.next_offset
    return 0


async def resend_command(client: AsyncClient, args: argparse.Namespace) -> int:
    if bool(args.offsets) == args.all:
        raise UsageError("dlq resend takes offsets or --all")
    if any(o < 0 for o in args.offsets):
        raise UsageError("offsets are >= 0")
    bounds = await _dead_letter_queue(client, args.group)
    if bounds is None:
        return 0
    wanted = sorted(set(args.offsets)) if args.offsets else list(range(*bounds))
    counts: dict[str, int] = {}
    for i in range(0, len(wanted), RESEND_BATCH):
        for result in await client.resend_dead_letters(args.group, wanted[i : i + RESEND_BATCH]):
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            if result["status"] != "RESENT":
                print(f"tidemq: offset {result['offset']}: {result['status']}", file=sys.stderr)
    resent = counts.get("RESENT", 0)
    print(f"tidemq: sent {resent} dead letter{'s' if resent != 1 else ''} back to group {args.group}", file=sys.stderr)
    return 0 if resent == len(wanted) else 1


async def redrive_command(client: AsyncClient, args: argparse.Namespace) -> int:
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("--max-messages must be >= 1")
    if args.poll_ms < 1 or args.wait_s <= 0:
        raise UsageError("--poll-ms must be >= 1 and --wait-s > 0")
    if args.status:
        info = await client.redrive(args.group)
    else:
        info = await client.start_redrive(args.group, args.max_messages)
    if args.wait:
        deadline = time.monotonic() + args.wait_s
        while info["state"] != "done":
            if time.monotonic() > deadline:
                _show(info, args.format)
                raise RedriveNotDone(f"the redrive of {args.group} moved {info['moved']} of {info['total']} in {args.wait_s} s")
            await asyncio.sleep(args.poll_ms / 1000.0)
            info = await client.redrive(args.group)
    _show(info, args.format)
    return 0


def _show(info: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        print_json(info)
        return
    columns = ("group", "state", "moved", "skipped", "remaining", "total", "position", "dead_letters_after")
    print_table([c.upper() for c in columns], [[info[c] for c in columns]])
