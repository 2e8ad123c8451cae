"""HASettings: a broker's replication role and the limits of its HA connections.

Roles:
- "standalone" (the default): no replication; the store is an ASYNC_MASTER with no HA port.
- "master": listens on `ha_port`; `replication` "async" is RocketMQ's ASYNC_MASTER (puts are
  answered once stored) and "sync" its SYNC_MASTER (puts wait until a slave holds them).
- "slave": connects to `master_ha_address`, copies the master's commitlog and refuses puts.

The store's own `ha_*` settings (heartbeat, housekeeping, batch size, fall-behind bound) stay
in MessageStoreConfig; this class holds what only ha/ uses. Invariant: `validate()` has
passed before `attach()` uses the settings.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import ConfigInvalid, check_fields, setting
from ha.auth import MIN_SECRET_LENGTH
from ha.protocol import MAX_BROKER_ID_BYTES
from ha.tls import TLSFiles
from store import BrokerRole, MessageStoreConfig

ROLES = ("standalone", "master", "slave")
# Host names that always mean this machine (any other name is not provably loopback).
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
REPLICATION_MODES = ("async", "sync")
DEFAULT_HA_PORT = 10912
# option dest -> environment variable.
ENV_NAMES = {
    "role": "TIDEMQ_ROLE",
    "ha_port": "TIDEMQ_HA_PORT",
    "ha_host": "TIDEMQ_HA_HOST",
    "master_ha_address": "TIDEMQ_MASTER_HA_ADDRESS",
    "replication": "TIDEMQ_REPLICATION",
    "advertised_http_address": "TIDEMQ_ADVERTISED_HTTP_ADDRESS",
    "master_http_address": "TIDEMQ_MASTER_HTTP_ADDRESS",
    "ha_secret": "TIDEMQ_HA_SECRET",
    "ha_tls_ca_file": "TIDEMQ_HA_TLS_CA",
}


@dataclass
class HASettings:
    # "standalone", "master" or "slave".
    role: str = setting("standalone", choices=ROLES)
    # Master: TCP port slaves connect to.
    ha_port: int = setting(DEFAULT_HA_PORT, 0, 65_535)
    # Master: address the HA port listens on (loopback unless told otherwise).
    ha_host: str = setting("127.0.0.1")
    # Slave: the master's HA endpoint, "host:port".
    master_ha_address: str | None = setting(None)
    # Master: "sync" (SYNC_MASTER) or "async" (ASYNC_MASTER).
    replication: str = setting("async", choices=REPLICATION_MODES)
    # Master: its HTTP base URL, sent to slaves for their NOT_MASTER replies ("http://host:port").
    advertised_http_address: str | None = setting(None)
    # Slave: the master's HTTP base URL when it should not be learned from the handshake.
    master_http_address: str | None = setting(None)
    # Slave: longest wait for a TCP connect to the master.
    connect_timeout_ms: int = setting(3_000, 1, 600_000)
    # Slave: first pause before reconnecting after a failure (doubles on each failure).
    reconnect_backoff_min_ms: int = setting(100, 1, 600_000)
    # Slave: longest pause between reconnection attempts.
    reconnect_backoff_max_ms: int = setting(5_000, 1, 3_600_000)
    # Master: slave connections served at once; more are closed at accept.
    max_slave_connections: int = setting(8, 1, 1_024)
    # Master: SYNC_MASTER puts waiting for a slave at once; past it a put answers FLUSH_SLAVE_TIMEOUT at once.
    max_pending_transfers: int = setting(100_000, 1, 10_000_000)
    # How long a blocking socket call waits before the loop re-checks its stop flag.
    io_poll_ms: int = setting(100, 1, 60_000)
    # Master: longest pause of a connection's writer between two checks for new commitlog bytes.
    write_poll_ms: int = setting(10, 1, 60_000)
    # Bytes at the end of the slave's log whose CRC the handshake compares with the master's (its whole last
    # file when that holds fewer); a master requires a HELLO's check to cover as much before it counts the slave.
    handshake_check_bytes: int = setting(4_096, 1, 64 * 1024 * 1024)
    # Largest control frame either side accepts (an older master's topic table; ignored now: topics travel in the log).
    max_control_frame_bytes: int = setting(4 * 1024 * 1024, 1024, 256 * 1024 * 1024)
    # Shared secret both ends prove by HMAC before any log byte flows (>= 16 characters; unset on both: no proof).
    ha_secret: str | None = setting(None)
    # Longest the handshake (TLS, secret proof, HELLO and REPLY) may take before the connection is dropped.
    handshake_timeout_ms: int = setting(5_000, 100, 600_000)
    # Slave over TLS: CA file that signs the master's certificate (default: tls_client_ca_file, else the system CAs).
    ha_tls_ca_file: str | None = setting(None)

    def __post_init__(self) -> None:
        # Not a setting of the [ha] table: the HTTP server's --tls-cert/--tls-key/--tls-client-ca,
        # set by BrokerSettings.validate(), because the HA link uses the same files.
        self.tls: TLSFiles | None = None
        # Not a setting either: a cluster's election epoch (docs/cluster.md). A master names it in the
        # handshake; a slave refuses a master whose epoch is older. 0 outside a cluster.
        self.epoch = 0
        # Not a setting either: a cluster's SYNC master counts acknowledgements of every in-sync member and
        # needs at least this many of them (min_in_sync_replicas - 1); None: any one slave (RocketMQ 4).
        self.in_sync_min_acks: int | None = None

    def validate(self) -> HASettings:
        """Check every setting's type and range, then the relations; ConfigInvalid names the first broken one."""
        check_fields(self, "ha")
        if self.role == "slave":
            if not self.master_ha_address:
                raise ConfigInvalid("a slave needs --master-ha-address host:port")
            parse_address(self.master_ha_address)
        if self.ha_secret is not None and len(self.ha_secret) < MIN_SECRET_LENGTH:
            raise ConfigInvalid(f"ha_secret must be at least {MIN_SECRET_LENGTH} characters (it has {len(self.ha_secret)})")
        if self.advertised_http_address is not None and len(self.advertised_http_address.encode()) > MAX_BROKER_ID_BYTES:
            # A slave names itself by it in the HA handshake (its broker id in a cluster).
            raise ConfigInvalid(f"advertised_http_address must be at most {MAX_BROKER_ID_BYTES} bytes")
        if self.reconnect_backoff_max_ms < self.reconnect_backoff_min_ms:
            raise ConfigInvalid("reconnect_backoff_max_ms must be >= reconnect_backoff_min_ms")
        return self

    def exposure_problem(self) -> str | None:
        """Why a master may not listen on `ha_host`: a non-loopback address without `ha_secret`, where anyone who
        reaches the port could read the whole log and acknowledge SYNC_MASTER puts (None: it may)."""
        if self.ha_secret is not None or is_loopback(self.ha_host):
            return None
        return (
            f"refusing to listen for slaves on {self.ha_host}:{self.ha_port} without ha_secret: anyone who reaches it "
            "could copy the whole log and acknowledge puts no replica holds; set ha_secret (TIDEMQ_HA_SECRET or "
            "[ha] ha_secret, docs/ha.md) or listen on a loopback address"
        )

    def secret_bytes(self) -> bytes | None:
        return self.ha_secret.encode() if self.ha_secret is not None else None

    def broker_role(self) -> BrokerRole:
        """The store role this setting stands for."""
        if self.role == "slave":
            return BrokerRole.SLAVE
        if self.role == "master" and self.replication == "sync":
            return BrokerRole.SYNC_MASTER
        return BrokerRole.ASYNC_MASTER

    def apply_to(self, config: MessageStoreConfig) -> MessageStoreConfig:
        """Set the store's role; call before the store is constructed."""
        config.broker_role = self.broker_role()
        return config


def is_loopback(host: str) -> bool:
    """Whether `host` surely names this machine: a loopback address, or one of LOOPBACK_NAMES."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name that resolves elsewhere (or anywhere): not provably loopback


def parse_address(text: str) -> tuple[str, int]:
    """ "host:port" -> (host, port); ConfigInvalid when it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigInvalid(f"address must be host:port, not {text!r}")
    return host, int(port)


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --role, --ha-port, --ha-host, --master-ha-address, --replication and the address options."""
    group = parser.add_argument_group("replication")
    group.add_argument("--role", choices=ROLES, help="standalone (default), master or slave (env TIDEMQ_ROLE)")
    group.add_argument("--ha-port", dest="ha_port", help=f"master: port slaves connect to (default {DEFAULT_HA_PORT}; env TIDEMQ_HA_PORT)")
    group.add_argument("--ha-host", dest="ha_host", help="master: address the HA port listens on (default 127.0.0.1; env TIDEMQ_HA_HOST)")
    group.add_argument("--master-ha-address", dest="master_ha_address", help="slave: the master's host:port (env TIDEMQ_MASTER_HA_ADDRESS)")
    group.add_argument(
        "--replication",
        choices=REPLICATION_MODES,
        help="master: sync (SYNC_MASTER) or async (ASYNC_MASTER, default; env TIDEMQ_REPLICATION)",
    )
    group.add_argument(
        "--advertised-http-address",
        dest="advertised_http_address",
        help="master: HTTP base URL slaves name in NOT_MASTER replies (env TIDEMQ_ADVERTISED_HTTP_ADDRESS)",
    )
    group.add_argument(
        "--master-http-address",
        dest="master_http_address",
        help="slave: the master's HTTP base URL, instead of the one learned from the master (env TIDEMQ_MASTER_HTTP_ADDRESS)",
    )
    # No --ha-secret: a command line is visible to every local user (ps); the secret comes from the
    # environment (TIDEMQ_HA_SECRET) or the config file's [ha] table.
    group.add_argument(
        "--ha-tls-ca",
        dest="ha_tls_ca_file",
        help="slave over TLS: CA file that signs the master's certificate (env TIDEMQ_HA_TLS_CA)",
    )


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> HASettings:
    """Settings from parsed options, falling back to TIDEMQ_* variables; ConfigInvalid when unusable."""
    environ = environ or {}
    values: dict[str, Any] = {}
    for dest, env_name in ENV_NAMES.items():
        value = getattr(args, dest, None)
        if value is None:
            value = environ.get(env_name) or None
        if value is not None:
            values[dest] = value
    if "ha_port" in values:
        text = str(values["ha_port"])
        if not text.isdigit():
            raise ConfigInvalid(f"ha port must be a port number, not {text!r}")
        values["ha_port"] = int(text)
    return HASettings(**values).validate()  # check_fields in validate() checks what the options gave
