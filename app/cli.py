"""The `tidemq` command line: `tidemq serve [options]` (also `python -m app serve`), `tidemq acl`,
and the client commands of `tidemq.cli` (produce, consume, topics, groups, offsets, lookup).

Every option can also come from a TIDEMQ_* environment variable (TIDEMQ_HOST, TIDEMQ_PORT,
TIDEMQ_STORE, TIDEMQ_CONFIG, TIDEMQ_FLUSH, TIDEMQ_LOG_LEVEL, TIDEMQ_LOG_FORMAT, TIDEMQ_ACCESS_LOG,
TIDEMQ_PUSH_ALLOWED_HOSTS (comma-separated),
and the replication options' TIDEMQ_ROLE, TIDEMQ_HA_PORT, ...); an option on the command line wins over the variable, which
wins over the config file's [broker] (replication: [ha]) table.

Exit statuses: 0 after a clean stop, 2 for unusable settings, 3 when the start failed (the
store is locked or cannot be loaded, the HTTP or HA port is taken); each refusal is one line
on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from app.cli_access import access_values, add_acl_command, add_serve_arguments, flag_value, run_acl_command
from app.logs import LOG_FORMATS
from app.logs import configure as configure_logging
from app.problems import StartRefused
from app.settings import FLUSH_MODES, LOG_LEVELS, BrokerSettings, build_settings, load_toml
from cluster import settings as cluster_settings
from core import ConfigInvalid
from ha import HAStartFailed, add_cli_arguments
from ha.settings import ENV_NAMES as HA_ENV_NAMES
from tidemq.cli import absorb_trailing_files, add_client_commands, is_client_command, run_client_command
from tidemq.version import __version__

ENV_PREFIX = "TIDEMQ_"
# option dest -> environment variable suffix.
ENV_NAMES = {
    "host": "HOST",
    "port": "PORT",
    "store_dir": "STORE",
    "config": "CONFIG",
    "flush": "FLUSH",
    "log_level": "LOG_LEVEL",
    "log_format": "LOG_FORMAT",
}
# TLS options (docs/tls.md): dest -> environment variable suffix.
TLS_ENV_NAMES = {"tls_cert_file": "TLS_CERT", "tls_key_file": "TLS_KEY", "tls_client_ca_file": "TLS_CLIENT_CA"}
# Exit status of a start-up that failed (uvicorn's own for a failed start-up).
EXIT_START_FAILED = 3
# Exit status of unusable settings (argparse's own for a bad option).
EXIT_CONFIG_INVALID = 2


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tidemq", description="tidemq: a message broker spoken over plain HTTP")
    top.add_argument("--version", action="version", version=f"tidemq {__version__}")
    commands = top.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="load and recover the store, then serve the HTTP API")
    serve.add_argument("--host", help="listen address (default 127.0.0.1; env TIDEMQ_HOST)")
    serve.add_argument("--port", type=int, help="listen port (default 8080; env TIDEMQ_PORT)")
    serve.add_argument("--store", dest="store_dir", help="store directory (default ./data; env TIDEMQ_STORE)")
    serve.add_argument("--config", help="TOML file with [broker] and [store] tables (env TIDEMQ_CONFIG)")
    serve.add_argument(
        "--flush", choices=sorted(FLUSH_MODES), help="sync: answer puts after the flush; async: flush periodically (env TIDEMQ_FLUSH)"
    )
    serve.add_argument("--log-level", dest="log_level", choices=LOG_LEVELS, help="log level (default info; env TIDEMQ_LOG_LEVEL)")
    serve.add_argument(
        "--log-format", dest="log_format", choices=LOG_FORMATS, help="text, or json: one object per line (env TIDEMQ_LOG_FORMAT)"
    )
    serve.add_argument(
        "--access-log",
        dest="access_log",
        action="store_true",
        default=None,
        help="log one line per HTTP request: route, status, duration, bytes (env TIDEMQ_ACCESS_LOG)",
    )
    add_cli_arguments(serve)
    cluster_settings.add_cli_arguments(serve)
    add_tls_arguments(serve)
    add_serve_arguments(serve)
    add_acl_command(commands)
    add_client_commands(commands)
    return top


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS (HTTP and the HA link; docs/tls.md)")
    group.add_argument(
        "--tls-cert", dest="tls_cert_file", help="PEM certificate (chain): serve HTTPS and TLS on the HA link (env TIDEMQ_TLS_CERT)"
    )
    group.add_argument("--tls-key", dest="tls_key_file", help="PEM private key of --tls-cert (env TIDEMQ_TLS_KEY)")
    group.add_argument(
        "--tls-client-ca",
        dest="tls_client_ca_file",
        help="PEM CA that must sign client certificates: mutual TLS (env TIDEMQ_TLS_CLIENT_CA)",
    )


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> BrokerSettings:
    """Settings from parsed options, the environment and the config file (in that precedence)."""
    values: dict[str, object] = {}
    for dest, suffix in ENV_NAMES.items():
        value = getattr(args, dest)
        if value is None:
            value = environ.get(ENV_PREFIX + suffix) or None
        values[dest] = value
    if isinstance(values["port"], str):
        text = values["port"]
        if not text.isdigit():
            raise ConfigInvalid(f"{ENV_PREFIX}PORT must be a port number, not {text!r}")
        values["port"] = int(text)
    if isinstance(values["flush"], str) and values["flush"] not in FLUSH_MODES:
        raise ConfigInvalid(f"flush must be sync or async, not {values['flush']!r}")
    values["access_log"] = flag_value(args.access_log, environ, ENV_PREFIX + "ACCESS_LOG")
    for dest, suffix in TLS_ENV_NAMES.items():
        value = getattr(args, dest, None) or environ.get(ENV_PREFIX + suffix) or None
        if value is not None:  # left out when unset, so the config file's [broker] value stays
            values[dest] = value
    ha_values = {dest: getattr(args, dest, None) or environ.get(env_name) or None for dest, env_name in HA_ENV_NAMES.items()}
    values.update(access_values(args, environ))
    hosts = environ.get(ENV_PREFIX + "PUSH_ALLOWED_HOSTS")
    if hosts is not None:  # comma-separated; wins over [broker] push_allowed_hosts
        values["push_allowed_hosts"] = [h.strip() for h in hosts.split(",") if h.strip()]
    config_path = values.pop("config")
    toml = load_toml(str(config_path)) if config_path else None
    return build_settings(toml, values, ha_values, cluster_settings.cli_values(args, environ))


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    top = parser()
    args, extras = top.parse_known_args(argv)
    if extras and not absorb_trailing_files(args, extras):
        top.error(f"unrecognized arguments: {' '.join(extras)}")
    if args.command == "acl":
        return run_acl_command(args)
    if is_client_command(args):
        return run_client_command(args, environ)
    try:
        settings = settings_from(args, os.environ if environ is None else environ)
    except ConfigInvalid as e:
        print(f"tidemq: {e}", file=sys.stderr)
        return EXIT_CONFIG_INVALID
    configure_logging(settings.log_level, settings.log_format)
    from app.server import RestartRequested, run  # imported late: `tidemq --help` stays fast

    try:
        run(settings)
    except RestartRequested as e:
        # The same command again, in this process (same pid): the start-up cuts the log and rejoins as a slave.
        # On the ports it had (the last --port and --ha-port win): a `--port 0` start keeps its address, its
        # cluster id, and a `--ha-port 0` start the HA address its registration advertised.
        logging.getLogger("tidemq.app").warning("restarting the broker: %s", e)
        logging.shutdown()
        ports = ["--port", str(settings.port), "--ha-port", str(settings.ha.ha_port)]
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:], *ports])
    except HAStartFailed as e:
        print(f"tidemq: replication could not start: {e}", file=sys.stderr)
        return EXIT_START_FAILED
    except StartRefused as e:
        print(f"tidemq: {e}", file=sys.stderr)
        return EXIT_START_FAILED
    return 0
