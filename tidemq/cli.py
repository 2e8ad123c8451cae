"""The client side of the `tidemq` command: produce, consume, topics, groups, offsets, lookup, dlq.

`app.cli` registers these next to `tidemq serve`; they use only `tidemq.AsyncClient`.
`--url` (env TIDEMQ_URL, default http://127.0.0.1:8080) and `--token` (env TIDEMQ_TOKEN) name
the broker and the bearer token; `--retry-total-s` bounds the retries that follow a cluster's
failover (tidemq.failover).

Exit statuses: 0 done; 1 the broker refused a request (its problem printed as one line on
stderr: `tidemq: <status> <CODE>: <detail>`); 2 bad usage (also a bad --url); 4 no usable answer
(cannot connect, timed out, a broken reply); 130 interrupted. A closed stdout (`| head`) ends
the command quietly with 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from tidemq.async_client import AsyncClient
from tidemq.cli_admin import add_admin_commands
from tidemq.cli_consume import add_consume_command
from tidemq.cli_dlq import add_dlq_command
from tidemq.cli_groups import add_group_commands
from tidemq.cli_output import UsageError
from tidemq.cli_produce import add_produce_command
from tidemq.errors import ProblemError, TidemqClientError
from tidemq.options import DEFAULT_RETRY_TOTAL_S, DEFAULT_URL

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NO_ANSWER = 4
EXIT_INTERRUPTED = 130

Command = Callable[[AsyncClient, argparse.Namespace], Coroutine[Any, Any, int]]


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("broker")
    group.add_argument("--url", help=f"the broker's URL (env TIDEMQ_URL; default {DEFAULT_URL})")
    group.add_argument("--token", help="bearer token of an ACL account (env TIDEMQ_TOKEN)")
    group.add_argument("--timeout-s", dest="timeout_s", type=float, default=30.0, help="longest wait for one reply (default 30)")
    group.add_argument(
        "--retry-total-s",
        dest="retry_total_s",
        type=float,
        default=DEFAULT_RETRY_TOTAL_S,
        help=f"longest a request retries NO_MASTER, FORWARD_FAILED and NOT_ENOUGH_REPLICAS, following a cluster's failover "
        f"(default {DEFAULT_RETRY_TOTAL_S:g}; 0: no retry)",
    )
    return common


def add_client_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = common_options()
    add_produce_command(commands, common)
    add_consume_command(commands, common)
    add_admin_commands(commands, common)
    add_group_commands(commands, common)
    add_dlq_command(commands, common)


def absorb_trailing_files(args: argparse.Namespace, extras: list[str]) -> bool:
    """`produce TOPIC --queue 1 a.txt b.txt`: argparse leaves positionals after an option unparsed;
    they are produce's files. False when `extras` are anything else."""
    if getattr(args, "command", None) != "produce" or any(e.startswith("-") for e in extras):
        return False
    args.files.extend(Path(e) for e in extras)
    return True


def is_client_command(args: argparse.Namespace) -> bool:
    return callable(getattr(args, "client_command", None))


def run_client_command(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    url = args.url or env.get("TIDEMQ_URL") or DEFAULT_URL
    token = args.token or env.get("TIDEMQ_TOKEN") or None
    command: Command = args.client_command
    try:
        if args.timeout_s <= 0:
            raise UsageError("--timeout-s must be > 0")
        client = AsyncClient(url, token=token, timeout_s=args.timeout_s, retry_total_s=args.retry_total_s)
    except UsageError as e:
        return _fail(e.detail, EXIT_USAGE)
    except ValueError as e:
        return _fail(str(e), EXIT_USAGE)
    try:
        return asyncio.run(_run(client, command, args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except UsageError as e:
        return _fail(e.detail, EXIT_USAGE)
    except ProblemError as e:
        return _fail(f"{e.status} {e.code}: {e.detail}", EXIT_REFUSED)
    except TidemqClientError as e:
        return _fail(f"{e.code}: {e.detail}", EXIT_NO_ANSWER)


async def _run(client: AsyncClient, command: Command, args: argparse.Namespace) -> int:
    async with client:
        return await command(client, args)


def _fail(line: str, status: int) -> int:
    print(f"tidemq: {line}", file=sys.stderr)
    return status


def _quiet_stdout() -> None:
    # Python flushes stdout again at exit; point it at /dev/null so that flush cannot fail too.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
