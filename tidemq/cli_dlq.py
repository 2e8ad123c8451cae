"""`tidemq dlq redrive GROUP`: move a group's dead letters back to be received again
(docs/http-api.md, "Dead-letter redrive"), and show the progress.

`--wait` polls the redrive until it is done (every `--poll-ms`, at most `--wait-s`); exit status 1
with the broker's problem when it refuses (409 REDRIVE_RUNNING: one runs already), 4 when the
wait ends before the redrive does. `--status` only shows the group's latest redrive.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from tidemq.async_client import AsyncClient
from tidemq.cli_output import UsageError, print_json, print_table
from tidemq.errors import TidemqClientError

# How long `--wait` waits by default, and how often it asks.
DEFAULT_WAIT_S = 300.0
DEFAULT_POLL_MS = 200


class RedriveNotDone(TidemqClientError):
    """Raised when `--wait` ended before the redrive was done."""

    def __init__(self, detail: str) -> None:
        super().__init__("REDRIVE_NOT_DONE", None, detail)


def add_dlq_command(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    dlq = commands.add_parser("dlq", help="a consumer group's dead letters")
    actions = dlq.add_subparsers(dest="dlq_action", required=True)
    redrive = actions.add_parser("redrive", parents=[common], help="move a group's dead letters back to be received again")
    redrive.add_argument("group")
    redrive.add_argument("--max-messages", dest="max_messages", type=int, help="move at most this many (default: every one)")
    redrive.add_argument("--status", action="store_true", help="only show the group's latest redrive")
    redrive.add_argument("--wait", action="store_true", help="wait until the redrive is done, then show it")
    redrive.add_argument("--wait-s", dest="wait_s", type=float, default=DEFAULT_WAIT_S, help="longest --wait (default 300)")
    redrive.add_argument("--poll-ms", dest="poll_ms", type=int, default=DEFAULT_POLL_MS, help="how often --wait asks (default 200)")
    redrive.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or json")
    redrive.set_defaults(client_command=redrive_command)


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


def _show(info: dict, fmt: str) -> None:
    if fmt == "json":
        print_json(info)
        return
    columns = ("group", "state", "moved", "skipped", "remaining", "total", "position", "dead_letters_after")
    print_table([c.upper() for c in columns], [[info[c] for c in columns]])
