"""The command line's access-control parts: `serve --acl/--insecure-open` and `tidemq acl hash`.

Kept apart from app/cli.py so that file only gains a few calls."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from app.acl import token_hash
from core import ConfigInvalid

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group("access control")
    group.add_argument("--acl", dest="acl_file", help="ACL file: accounts, token hashes, permissions (env TIDEMQ_ACL)")
    group.add_argument(
        "--insecure-open",
        dest="insecure_open",
        action="store_true",
        default=None,
        help="without --acl, allow a non-loopback --host: anyone who reaches the port may do anything (env TIDEMQ_INSECURE_OPEN)",
    )


def add_acl_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acl = commands.add_parser("acl", help="access-control helpers")
    actions = acl.add_subparsers(dest="acl_command", required=True)
    hashing = actions.add_parser("hash", help="print the token_sha256 of a token (read from stdin when not given)")
    hashing.add_argument("token", nargs="?", help="the token (prefer stdin: an argument stays in the shell history)")


def access_values(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, object]:
    """acl_file and insecure_open from the options, else TIDEMQ_ACL / TIDEMQ_INSECURE_OPEN (None: not given)."""
    acl_file = getattr(args, "acl_file", None) or environ.get("TIDEMQ_ACL") or None
    insecure = flag_value(getattr(args, "insecure_open", None), environ, "TIDEMQ_INSECURE_OPEN")
    return {"acl_file": acl_file, "insecure_open": insecure}


def flag_value(given: bool | None, environ: Mapping[str, str], env_name: str) -> bool | None:
    """A store_true option's value, else its environment variable's (true/false words); None: neither given."""
    text = environ.get(env_name)
    if given is not None or text is None:
        return given
    if text.lower() not in TRUE_WORDS | FALSE_WORDS:
        raise ConfigInvalid(f"{env_name} must be true or false, not {text!r}")
    return text.lower() in TRUE_WORDS


def run_acl_command(args: argparse.Namespace) -> int:
    token = args.token if args.token is not None else sys.stdin.readline().rstrip("\r\n")
    if not token:
        print("tidemq: acl hash needs a non-empty token", file=sys.stderr)
        return 2
    print(token_hash(token))
    return 0
