"""`tidemq topics|offsets|lookup`: administration and queries, as aligned columns or (`--format json`) as
the broker's JSON. `topics` lists the topics producers and consumers use; the broker's own (delay levels,
timers, transactions, the revive topic) and the groups' retry and dead-letter topics only with
`--internal`, marked by their kind, as `rpk topic list -i` does. `tidemq groups` is tidemq.cli_groups."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from tidemq.async_client import AsyncClient
from tidemq.cli_format import message_printer, write_formatted
from tidemq.cli_output import UsageError, print_json, print_table
from tidemq.models import TopicInfo

TABLE_FORMATS = ("table", "json")


def add_admin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table (default) or json")

    topics = commands.add_parser("topics", parents=[common, output], help="list, show, create or delete topics")
    topics.add_argument("action", nargs="?", choices=("list", "show", "create", "delete"), default="list")
    topics.add_argument("name", nargs="?", help="the topic (show, create, delete)")
    topics.add_argument("--queues", type=int, help="create: the number of queues (default: the broker's)")
    topics.add_argument("--perm", choices=("rw", "r", "w"), default="rw", help="create: r, w or rw (default)")
    topics.add_argument(
        "-i", "--internal", action="store_true", help="list: also the broker's own topics and the groups' retry and dead-letter topics"
    )
    topics.set_defaults(client_command=topics_command)

    offsets = commands.add_parser("offsets", parents=[common, output], help="a group's committed offsets and lag per queue")
    offsets.add_argument("group")
    offsets.add_argument("topic")
    offsets.add_argument(
        "--commit", nargs=2, type=int, metavar=("QUEUE", "OFFSET"), help="first commit OFFSET as the group's position in QUEUE"
    )
    offsets.set_defaults(client_command=offsets_command)

    lookup = commands.add_parser("lookup", parents=[common], help="find messages by key, client id or offset message id")
    lookup.add_argument("topic", nargs="?", help="the topic (with --key or --msg-id)")
    which = lookup.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", help="messages sent with this key")
    which.add_argument("--msg-id", dest="msg_id", help="the message with this client message id")
    which.add_argument("--id", dest="offset_msg_id", help="the message with this offset message id (no topic needed)")
    lookup.add_argument("--max-messages", dest="max_messages", type=int, default=32, help="at most this many (default 32)")
    lookup.add_argument("-f", "--format", default="json", help="json (default), lines, raw or a format string, as for consume")
    lookup.set_defaults(client_command=lookup_command)


def _topic_rows(topics: list[TopicInfo]) -> list[tuple[object, ...]]:
    return [(t.topic, t.read_queues, t.write_queues, t.perm) for t in topics]


async def topics_command(client: AsyncClient, args: argparse.Namespace) -> int:
    if args.action != "list" and not args.name:
        raise UsageError(f"topics {args.action} needs a topic name")
    if args.action == "list":
        found = [t for t in await client.topics() if args.internal or t.kind in (None, "user")]
        if args.format == "json":
            print_json([dataclasses.asdict(t) for t in found])
        elif args.internal:
            print_table(
                ("TOPIC", "READ_QUEUES", "WRITE_QUEUES", "PERM", "KIND"),
                [(*row, t.kind or "user") for row, t in zip(_topic_rows(found), found, strict=True)],
            )
        else:
            print_table(("TOPIC", "READ_QUEUES", "WRITE_QUEUES", "PERM"), _topic_rows(found))
        return 0
    if args.action == "delete":
        await client.delete_topic(args.name)
        print(f"tidemq: deleted topic {args.name}", file=sys.stderr)
        return 0
    if args.action == "create":
        if args.queues is not None and args.queues < 1:
            raise UsageError("--queues must be >= 1")
        info = await client.create_topic(args.name, args.queues, args.perm)
        if info.changed:
            changes = ", ".join(f"{name} {c['old']} -> {c['new']}" for name, c in info.changed.items())
            print(f"tidemq: topic {args.name} existed; changed {changes}", file=sys.stderr)
        elif info.changed is not None:
            print(f"tidemq: topic {args.name} exists already as asked; nothing changed", file=sys.stderr)
        if info.warning:
            print(f"tidemq: warning: {info.warning}", file=sys.stderr)
    else:
        info = await client.topic(args.name)
    if args.format == "json":
        print_json(dataclasses.asdict(info))
    else:
        print_table(("TOPIC", "READ_QUEUES", "WRITE_QUEUES", "PERM"), _topic_rows([info]))
        print()
        print_table(("QUEUE", "MIN_OFFSET", "MAX_OFFSET"), [(q.queue_id, q.min_offset, q.max_offset) for q in info.queues or []])
    return 0


async def offsets_command(client: AsyncClient, args: argparse.Namespace) -> int:
    if args.commit is not None:
        queue, offset = args.commit
        if queue < 0 or offset < 0:
            raise UsageError("--commit takes a queue and an offset, both >= 0")
        await client.commit_offset(args.group, args.topic, queue, offset)
    found = await client.offsets(args.group, args.topic)
    if args.format == "json":
        print_json([dataclasses.asdict(q) for q in found])
    else:
        print_table(
            ("QUEUE", "COMMITTED", "MIN_OFFSET", "MAX_OFFSET", "LAG"),
            [(q.queue_id, q.committed_offset, q.min_offset, q.max_offset, q.lag) for q in found],
        )
    return 0


async def lookup_command(client: AsyncClient, args: argparse.Namespace) -> int:
    if args.offset_msg_id:
        messages = [await client.message(args.offset_msg_id)]
    else:
        if not args.topic:
            raise UsageError("lookup --key/--msg-id needs the topic")
        if args.max_messages < 1:
            raise UsageError("--max-messages must be >= 1")
        messages = await client.query(args.topic, key=args.key, msg_id=args.msg_id, max_messages=args.max_messages)
    write_formatted(sys.stdout.buffer, messages, message_printer(args.format))
    return 0
