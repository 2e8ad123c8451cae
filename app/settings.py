"""BrokerSettings: the front end's settings, and how a TOML file, the environment and the
command line combine into them.

Precedence, highest first: command-line option, TIDEMQ_* environment variable, the TOML
file's `[broker]` (or, for replication, `[ha]`) table, the defaults below. The TOML `[store]`
table goes unchanged to `MessageStoreConfig.from_dict`; `--store` and `--flush` override its
directory and flush mode, and the replication role (`ha.HASettings`) sets its `broker_role`.

Invariant: after `validate()`, `store.broker_role` is the role the HA settings stand for, so
`ha.attach()` may be called on a store built from `store`.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from typing import Any

from ha import HASettings
from store import BrokerRole, FlushDiskType, MessageStoreConfig
from store.errors import ConfigInvalid

MIB = 1024 * 1024
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
FLUSH_MODES = {"sync": FlushDiskType.SYNC_FLUSH, "async": FlushDiskType.ASYNC_FLUSH}


@dataclass
class BrokerSettings:
    # Address the HTTP server listens on; loopback unless told otherwise.
    host: str = "127.0.0.1"
    # TCP port of the HTTP server.
    port: int = 8080
    # Root directory of the store (commitlog, consume queues, index, metadata).
    store_dir: str = "./data"
    # "sync" or "async" overrides the store's flush_disk_type; None keeps the store setting.
    flush: str | None = None
    # Log level of the server and the store.
    log_level: str = "info"
    # Producing to an unknown topic creates it with the store's default queue count.
    auto_create_topics: bool = True
    # Largest request body that is not JSON (raw produce): the largest message plus slack for headers.
    max_request_body_bytes: int = 4 * MIB + 64 * 1024
    # Largest JSON request body (base64 inflates bodies by 4/3 and a batch holds up to 1,000 messages).
    max_json_body_bytes: int = 32 * MIB
    # Longest a pull may be held waiting for a message (the pull's wait_ms is capped by it).
    max_wait_ms: int = 30_000
    # Largest `max` a pull may ask for (the store's transfer limits may return fewer).
    max_pull_messages: int = 1_024
    # Held long-polls at once; past it a pull that would be held is answered 503 TOO_MANY_WAITERS.
    max_held_pulls: int = 10_000
    # Largest `max` of a key query.
    max_query_messages: int = 1_024
    # Threads that run store reads (which may page-fault) and metadata writes off the event loop.
    read_threads: int = 4
    # Serve produce and pull without FastAPI's router and parameter solver (same answers; off to compare).
    hot_routes: bool = True
    # A pull this close (in messages) to its queue's max offset reads on the event loop, not in the pool.
    inline_read_window_messages: int = 1_024
    # Store calls queued for or running in the read pool; past it a request is answered 503 READS_BUSY.
    max_pending_reads: int = 1_024
    # Seconds uvicorn waits for in-flight requests after SIGTERM before closing them.
    graceful_shutdown_s: int = 10
    # Longest a busy thread keeps the GIL when another wants it (CPython's default is 5,000): a short
    # interval lets the dispatch thread run soon after a put, which bounds the long-poll wake-up delay.
    gil_switch_interval_us: int = 500
    # A request's headers must be complete this long after their first byte (a new connection's first
    # request: after it opened); past it the connection is closed (408 when part of a request arrived).
    header_read_timeout_ms: int = 10_000
    # A request's body must arrive whole this long after its headers; past it 408 REQUEST_TIMEOUT, connection closed.
    body_read_timeout_ms: int = 30_000
    # Seconds an idle keep-alive connection is kept open between requests (uvicorn's timeout_keep_alive).
    keep_alive_timeout_s: int = 5
    # Open HTTP connections; a connection past it is answered 503 TOO_MANY_CONNECTIONS (health checks still served).
    max_connections: int = 12_000
    # File descriptors kept for the store's files, logs and replication beyond max_connections, when the
    # soft RLIMIT_NOFILE is raised at start to fit both.
    reserved_fds: int = 1_024
    # The store's configuration (the `[store]` table).
    store: MessageStoreConfig = field(default_factory=MessageStoreConfig)
    # Replication role and endpoints (the `[ha]` table, --role and the other replication options).
    ha: HASettings = field(default_factory=HASettings)

    def validate(self) -> BrokerSettings:
        """Raise ConfigInvalid when a setting is out of range."""
        checks = [
            (0 <= self.port <= 65535, "port must be in 0..65535"),
            (self.log_level in LOG_LEVELS, f"log level must be one of {', '.join(LOG_LEVELS)}"),
            (self.flush is None or self.flush in FLUSH_MODES, "flush must be sync or async"),
            (self.max_request_body_bytes > 0, "max_request_body_bytes must be positive"),
            (self.max_json_body_bytes > 0, "max_json_body_bytes must be positive"),
            (0 <= self.max_wait_ms <= 300_000, "max_wait_ms must be in 0..300000"),
            (self.max_pull_messages > 0, "max_pull_messages must be positive"),
            (50 <= self.gil_switch_interval_us <= 100_000, "gil_switch_interval_us must be in 50..100000"),
            (self.max_held_pulls >= 0, "max_held_pulls must not be negative"),
            (self.max_query_messages > 0, "max_query_messages must be positive"),
            (self.read_threads > 0, "read_threads must be positive"),
            (self.max_pending_reads > 0, "max_pending_reads must be positive"),
            (self.inline_read_window_messages >= 0, "inline_read_window_messages must not be negative"),
            (self.graceful_shutdown_s >= 0, "graceful_shutdown_s must not be negative"),
            (100 <= self.header_read_timeout_ms <= 600_000, "header_read_timeout_ms must be in 100..600000"),
            (100 <= self.body_read_timeout_ms <= 3_600_000, "body_read_timeout_ms must be in 100..3600000"),
            (1 <= self.keep_alive_timeout_s <= 3_600, "keep_alive_timeout_s must be in 1..3600"),
            (1 <= self.max_connections <= 1_000_000, "max_connections must be in 1..1000000"),
            (self.max_held_pulls < self.max_connections, "max_held_pulls must be below max_connections (a held pull holds a connection)"),
            (0 <= self.reserved_fds <= 1_000_000, "reserved_fds must be in 0..1000000"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigInvalid(message)
        self.store.store_path_root_dir = self.store_dir
        if self.flush is not None:
            self.store.flush_disk_type = FLUSH_MODES[self.flush]
        self.ha.validate()
        role = self.ha.broker_role()
        if self.store.broker_role is not BrokerRole.ASYNC_MASTER and self.store.broker_role is not role:
            # The role has one source of truth: a [store] broker_role may only repeat it.
            detail = f"[store] broker_role {self.store.broker_role.value} contradicts the replication role {self.ha.role!r} ({role.value})"
            raise ConfigInvalid(detail + "; set the role with --role / TIDEMQ_ROLE / [ha] role")
        self.ha.apply_to(self.store)
        if self.ha.role == "master" and self.ha.advertised_http_address is None:
            self.ha.advertised_http_address = f"http://{self.host}:{self.port}"
        self.store.validate()
        return self


BROKER_KEYS = {f.name for f in dataclasses.fields(BrokerSettings)} - {"store", "ha"}
INT_KEYS = {f.name for f in dataclasses.fields(BrokerSettings) if f.type == "int"}
# HASettings field -> its type's name ("int", "str", "str | None"), for the [ha] table's checks.
HA_TYPES = {f.name: str(f.type) for f in dataclasses.fields(HASettings)}
TABLES = ("broker", "store", "ha")


def load_toml(path: str) -> dict[str, Any]:
    """Read a TOML settings file; ConfigInvalid when it cannot be read or has unknown tables."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigInvalid(f"cannot read config file {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigInvalid(f"config file {path} is not valid TOML: {e}") from e
    unknown = set(data) - set(TABLES)
    if unknown:
        raise ConfigInvalid(f"unknown table(s) in {path}: {', '.join(sorted(unknown))} (expected [broker], [store] and [ha])")
    return data


def build_ha_settings(table: dict[str, Any], overrides: dict[str, Any]) -> HASettings:
    """HASettings from the `[ha]` table and explicit overrides (strings from options or the environment win)."""
    unknown = set(table) - set(HA_TYPES)
    if unknown:
        raise ConfigInvalid(f"unknown ha setting(s): {', '.join(sorted(unknown))}")
    for key, value in table.items():
        kind = HA_TYPES[key]
        if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigInvalid(f"ha setting {key} must be an integer")
        if kind != "int" and not isinstance(value, str):
            raise ConfigInvalid(f"ha setting {key} must be a string")
    values = {**table, **{k: v for k, v in overrides.items() if v is not None}}
    port = values.get("ha_port")
    if isinstance(port, str):
        if not port.isascii() or not port.isdigit():
            raise ConfigInvalid(f"ha port must be a port number, not {port!r}")
        values["ha_port"] = int(port)
    return HASettings(**values)


def build_settings(toml: dict[str, Any] | None, overrides: dict[str, Any], ha_overrides: dict[str, Any] | None = None) -> BrokerSettings:
    """Combine a parsed TOML file and explicit overrides (None values are skipped)."""
    toml = toml or {}
    broker = dict(toml.get("broker", {}))
    unknown = set(broker) - BROKER_KEYS
    if unknown:
        raise ConfigInvalid(f"unknown broker setting(s): {', '.join(sorted(unknown))}")
    broker.update({k: v for k, v in overrides.items() if v is not None})
    for key in INT_KEYS & set(broker):
        if isinstance(broker[key], bool) or not isinstance(broker[key], int):
            raise ConfigInvalid(f"broker setting {key} must be an integer")
    for key in ("auto_create_topics", "hot_routes"):
        if key in broker and not isinstance(broker[key], bool):
            raise ConfigInvalid(f"broker setting {key} must be true or false")
    store = MessageStoreConfig.from_dict(dict(toml.get("store", {})))
    ha = build_ha_settings(dict(toml.get("ha", {})), ha_overrides or {})
    return BrokerSettings(**broker, store=store, ha=ha).validate()
