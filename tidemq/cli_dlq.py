"""`tidemq dlq list|resend GROUP`: a group's dead letters (the messages `%DLQ%{group}` holds after the group's
max_reconsume_times redeliveries), printed as `consume` prints messages, and sent back to the group
(copies into its retry topic, reconsume times 0: POST /v1/groups/{group}/dead-letters/resend)."""

from __future__ import annotations

import argparse
import sys

from tidemq.async_client import AsyncClient
from tidemq.cli_consume import FORMAT_HELP
from tidemq.cli_format import message_printer, write_formatted
from tidemq.cli_output import UsageError
from tidemq.errors import NotFound

# Dead letters sent back per request (the broker takes at most 1,000).
RESEND_BATCH = 500
PULL_BATCH = 32
DLQ_PREFIX = "%DLQ%"
# Dead letters listed by default with --format lines/json: the topic they came from, the attempts, the offset.
DEFAULT_FORMAT = "%o\\t%h\\t%s\\n"


def add_dlq_command(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "dlq",
        parents=[common],
        help="a group's dead letters: list them, send them back to the group",
        description="list GROUP: print the dead letters (offset, properties with RETRY_TOPIC, body by default); "
        "resend GROUP OFFSET ... or --all: copy them into the group's retry topic, so the group receives them again",
    )
    p.add_argument("action", choices=("list", "resend"))
    p.add_argument("group")
    p.add_argument("offsets", nargs="*", type=int, help="resend: the dead letters' offsets (from list)")
    p.add_argument("--all", action="store_true", help="resend: every dead letter kept")
    p.add_argument("-f", "--format", default=DEFAULT_FORMAT, help=FORMAT_HELP + "; default '%%o\\t%%h\\t%%s\\n'")
    p.add_argument("-J", dest="format", action="store_const", const="json", help="JSON lines (as --format json)")
    p.set_defaults(client_command=dlq_command)


async def dlq_command(client: AsyncClient, args: argparse.Namespace) -> int:
    topic = DLQ_PREFIX + args.group
    try:
        info = await client.topic(topic)
    except NotFound:
        print(f"tidemq: group {args.group} has no dead letters ({topic} does not exist)", file=sys.stderr)
        return 0
    (queue,) = info.queues or []
    if args.action == "list":
        if args.offsets or args.all:
            raise UsageError("dlq list takes only the group")
        render = message_printer(args.format)
        offset = queue.min_offset
        while offset < queue.max_offset:
            got = await client.pull(topic, 0, offset, max_messages=PULL_BATCH)
            write_formatted(sys.stdout.buffer, got.messages, render)
            if got.next_offset <= offset:
                break
            offset = got.next_offset
        return 0
    if bool(args.offsets) == args.all:
        raise UsageError("dlq resend takes offsets or --all")
    if any(o < 0 for o in args.offsets):
        raise UsageError("offsets are >= 0")
    wanted = sorted(set(args.offsets)) if args.offsets else list(range(queue.min_offset, queue.max_offset))
    counts: dict[str, int] = {}
    for i in range(0, len(wanted), RESEND_BATCH):
        for result in await client.resend_dead_letters(args.group, wanted[i : i + RESEND_BATCH]):
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            if result["status"] != "RESENT":
                print(f"tidemq: offset {result['offset']}: {result['status']}", file=sys.stderr)
    resent = counts.get("RESENT", 0)
    print(f"tidemq: sent {resent} dead letter{'s' if resent != 1 else ''} back to group {args.group}", file=sys.stderr)
    return 0 if resent == len(wanted) else 1
