"""`tidemq groups [list|describe|reset|delete]`: consumer groups as rpk and kafka-consumer-groups show and move
them: every group's lag, one group's queues, consumers and dead letters, offsets reset to the earliest or
latest message or to a time (shown first; `--dry-run` stops there), and deletion."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from tidemq.async_client import AsyncClient
from tidemq.cli_output import UsageError, print_json, print_table
from tidemq.cli_time import parse_time

TABLE_FORMATS = ("table", "json")


def add_group_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    groups = commands.add_parser(
        "groups",
        parents=[common],
        help="consumer groups: list, describe, reset offsets, delete",
        description="list (default): every group with its topics and lag; describe GROUP: its topics, queues, consumers "
        "and dead letters; reset GROUP TOPIC --to-earliest|--to-latest|--to-time TIME|--to-offset N; delete GROUP",
    )
    groups.add_argument("action", nargs="?", choices=("list", "describe", "reset", "delete"), default="list")
    groups.add_argument("group", nargs="?", help="the group (describe, reset, delete)")
    groups.add_argument("topic", nargs="?", help="reset: the topic whose offsets move")
    to = groups.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", dest="to_earliest", action="store_true", help="reset: to each queue's first kept message")
    to.add_argument("--to-latest", dest="to_latest", action="store_true", help="reset: past each queue's last message")
    to.add_argument("--to-time", dest="to_time", help="reset: to the first message stored at or after TIME (10m, 2d back, ISO 8601, ms)")
    to.add_argument("--to-offset", dest="to_offset", type=int, help="reset: to this offset (in every queue, or in --queue)")
    groups.add_argument("-p", "--queue", type=int, help="reset: only this queue")
    groups.add_argument("--dry-run", dest="dry_run", action="store_true", help="reset: show the new offsets, commit nothing")
    groups.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table (default) or json")
    groups.set_defaults(client_command=groups_command)


async def groups_command(client: AsyncClient, args: argparse.Namespace) -> int:
    if args.action != "list" and not args.group:
        raise UsageError(f"groups {args.action} needs a group")
    if args.action == "list":
        return await list_groups(client, args)
    if args.action == "describe":
        return await describe_group(client, args)
    if args.action == "delete":
        await client.delete_group(args.group)
        print(f"tidemq: deleted group {args.group} (its settings and committed offsets)", file=sys.stderr)
        return 0
    return await reset_offsets(client, args)


async def list_groups(client: AsyncClient, args: argparse.Namespace) -> int:
    found = await client.groups()
    if args.format == "json":
        print_json(found)
        return 0
    rows = []
    for g in found:
        for t in g["topics"] or [{"topic": "-", "lag": "-", "in_flight": "-", "acked": "-"}]:
            rows.append((g["group"], t["topic"], t["lag"], t["in_flight"], t["acked"], "yes" if g["fifo"] else "no",
                         len(g.get("consumers") or []), g.get("dead_letters", 0)))  # fmt: skip
    print_table(("GROUP", "TOPIC", "LAG", "IN_FLIGHT", "ACKED", "FIFO", "CONSUMERS", "DEAD_LETTERS"), rows)
    return 0


async def describe_group(client: AsyncClient, args: argparse.Namespace) -> int:
    info = await client.group(args.group)
    queues: dict[str, Any] = {t["topic"]: await client.offsets(args.group, t["topic"]) for t in info["topics"]}
    if args.format == "json":
        print_json({**info, "queues": {t: [dataclasses.asdict(q) for q in qs] for t, qs in queues.items()}})
        return 0
    fifo = "yes" if info["fifo"] else "no"
    print(f"GROUP {info['group']}  FIFO {fifo}  MAX_RECONSUME_TIMES {info['max_reconsume_times']}  "
          f"DEAD_LETTERS {info['dead_letters']} ({info['dead_letter_topic']})")  # fmt: skip
    print()
    print_table(("TOPIC", "LAG", "RECEIVED", "ACKED", "REDELIVERED", "DEAD_LETTERED", "IN_FLIGHT"),
                [(t["topic"], t["lag"], t["received"], t["acked"], t["redelivered"], t["dead_lettered"], t["in_flight"])
                 for t in info["topics"]])  # fmt: skip
    print()
    rows = [(t, q.queue_id, q.committed_offset, q.max_offset, q.lag) for t, qs in queues.items() for q in qs]
    print_table(("TOPIC", "QUEUE", "COMMITTED", "LOG_END", "LAG"), rows)
    print()
    consumers = info.get("consumers") or []
    now = int(time.time() * 1000)
    print_table(("CONSUMER", "USER_AGENT", "LAST_SEEN", "REQUESTS", "WAITING", "TOPICS"),
                [(c["address"], c["user_agent"] or "-", f"{(now - c['last_seen_ms']) / 1000:.0f}s ago", c["requests"],
                  "yes" if c["waiting"] else "no", ",".join(c["topics"])) for c in consumers] or [("-", "-", "-", "-", "-", "-")])  # fmt: skip
    return 0


async def reset_offsets(client: AsyncClient, args: argparse.Namespace) -> int:
    if not args.topic:
        raise UsageError("groups reset needs a group and a topic")
    if not (args.to_earliest or args.to_latest or args.to_time or args.to_offset is not None):
        raise UsageError("groups reset needs --to-earliest, --to-latest, --to-time TIME or --to-offset N")
    if (args.queue is not None and args.queue < 0) or (args.to_offset is not None and args.to_offset < 0):
        raise UsageError("--queue and --to-offset are >= 0")
    current = await client.offsets(args.group, args.topic)
    if args.queue is not None:
        current = [q for q in current if q.queue_id == args.queue]
        if not current:
            raise UsageError(f"topic {args.topic} has no queue {args.queue}")
    when = parse_time(args.to_time, "--to-time") if args.to_time else None
    plan = []
    for q in current:
        if args.to_earliest:
            target = q.min_offset
        elif args.to_latest:
            target = q.max_offset
        elif when is not None:
            target = await client.offset_at(args.topic, q.queue_id, when)
        else:
            target = min(max(args.to_offset, q.min_offset), q.max_offset)
        plan.append((q.queue_id, q.committed_offset, target, q.max_offset - target))
    if args.format == "json":
        print_json([{"queue_id": p[0], "committed_offset": p[1], "new_offset": p[2], "new_lag": p[3]} for p in plan])
    else:
        print_table(("QUEUE", "COMMITTED", "NEW_OFFSET", "NEW_LAG"), plan)
    if args.dry_run:
        print("tidemq: dry run: nothing committed", file=sys.stderr)
        return 0
    await client.commit_offsets(args.group, [(args.topic, queue, target) for queue, _, target, _ in plan])
    print(f"tidemq: reset {args.group}'s offsets of {args.topic} in {len(plan)} queue{'s' if len(plan) != 1 else ''}", file=sys.stderr)
    return 0
