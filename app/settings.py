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
import ipaddress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from app.logs import LOG_FORMATS
from app.push_targets import allowed_host_entry
from app.toml_file import read_toml
from cluster.settings import ClusterSettings
from core import ConfigInvalid, check_fields, setting
from ha import HASettings
from ha.tls import TLSFiles
from store import BrokerRole, FlushDiskType, MessageStoreConfig

MIB = 1024 * 1024
GIB = 1024 * MIB
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
FLUSH_MODES = {"sync": FlushDiskType.SYNC_FLUSH, "async": FlushDiskType.ASYNC_FLUSH}


@dataclass
class BrokerSettings:
    # Address the HTTP server listens on; loopback unless told otherwise.
    host: str = setting("127.0.0.1")
    # TCP port of the HTTP server; 0: any free port, logged at start ("listening on URL", logger tidemq.listen).
    port: int = setting(8080, 0, 65_535)
    # Root directory of the store (commitlog, consume queues, index, metadata).
    store_dir: str = setting("./data")
    # "sync" or "async" overrides the store's flush_disk_type; None keeps the store setting.
    flush: str | None = setting(None, choices=tuple(FLUSH_MODES))
    # Log level of the server and the store.
    log_level: str = setting("info", choices=LOG_LEVELS)
    # Format of every log line, tidemq's and uvicorn's: "text", or "json" (one object per line).
    log_format: str = setting("text", choices=LOG_FORMATS)
    # Log one line per HTTP request on tidemq.access (method, path, route, status, duration, bytes, client).
    access_log: bool = setting(False)
    # Producing to an unknown topic creates it with the store's default queue count (off: 404 TOPIC_NOT_FOUND;
    # with an ACL the account also needs CREATE on the topic).
    auto_create_topics: bool = setting(False)
    # Largest request body that is not JSON (raw produce): the largest message plus slack for headers.
    max_request_body_bytes: int = setting(4 * MIB + 64 * 1024, 1024, GIB)
    # Largest JSON request body (base64 inflates bodies by 4/3 and a batch holds up to 1,000 messages).
    max_json_body_bytes: int = setting(32 * MIB, 1024, GIB)
    # Longest a pull may be held waiting for a message (the pull's wait_ms is capped by it).
    max_wait_ms: int = setting(30_000, 0, 300_000)
    # Largest `max` a pull may ask for (the store's transfer limits may return fewer).
    max_pull_messages: int = setting(1_024, 1, 100_000)
    # Held long-polls at once; past it a pull that would be held is answered 503 TOO_MANY_WAITERS.
    max_held_pulls: int = setting(10_000, 0, 1_000_000)
    # Period of the comment line an event stream (group consumption's /stream) sends to show it is alive.
    stream_heartbeat_ms: int = setting(15_000, 100, 300_000)
    # Event streams open at once; past it a stream is answered 503 TOO_MANY_STREAMS before its 200 (never counted in max_held_pulls).
    max_streams: int = setting(1_000, 0, 1_000_000)
    # Event streams one ACL account may have open at once; past it 503 TOO_MANY_STREAMS (without an ACL only max_streams bounds them).
    max_streams_per_account: int = setting(100, 0, 1_000_000)
    # Event streams' reads (receives) running at once (at most read_threads); the other streams wait their turn,
    # so they leave read threads to other requests.
    max_stream_reads: int = setting(2, 1, 256)
    # Threads that run store reads (which may page-fault) and metadata writes off the event loop.
    read_threads: int = setting(4, 1, 256)
    # Serve produce and pull without FastAPI's router and parameter solver (same answers; off to compare).
    hot_routes: bool = setting(True)
    # Serve a raw produce straight from the connection's read, no scope or coroutine (same answers; off to compare).
    produce_lane: bool = setting(True)
    # Under SYNC_FLUSH or on a SYNC_MASTER, how long the event loop waits itself for its turn's produces to be durable
    # before it serves more (as Redis's appendfsync always: one flush a turn, no hand-off); longer flushes are answered
    # when they end, the loop serving meanwhile. 0: the loop never waits. Not a RocketMQ setting.
    durable_wait_in_loop_ms: int = setting(20, 0, 1_000)
    # With that wait on, how long a turn's durable produces stay open for more while they are fewer than the group the
    # loop answered last (its producers' next puts are on the way): one flush for both. 0: never. Not a RocketMQ setting.
    durable_group_linger_us: int = setting(200, 0, 1_000_000)
    # A pull this close (in messages) to its queue's max offset reads on the event loop, not in the pool.
    inline_read_window_messages: int = setting(1_024, 0, 10_000_000)
    # Store calls queued for or running in the read pool; past it a request is answered 503 READS_BUSY.
    max_pending_reads: int = setting(1_024, 1, 1_000_000)
    # Seconds uvicorn waits for in-flight requests after SIGTERM before closing them.
    graceful_shutdown_s: int = setting(10, 0, 3_600)
    # Longest a busy thread keeps the GIL when another wants it (CPython's default is 5,000): a short
    # interval lets the dispatch thread run soon after a put, which bounds the long-poll wake-up delay.
    gil_switch_interval_us: int = setting(500, 50, 100_000)
    # A request's headers must be complete this long after their first byte (a new connection's first
    # request: after it opened); past it the connection is closed (408 when part of a request arrived).
    header_read_timeout_ms: int = setting(10_000, 100, 600_000)
    # Bytes of one request's line and headers at most; past it 431 HEADERS_TOO_LARGE, connection closed.
    max_header_bytes: int = setting(65_536, 1_024, 16 * 1024 * 1024)
    # Bytes of incomplete request headers held over all connections at most; a connection that would
    # pass it is answered 503 HEADERS_BUSY and closed (the bytes are never kept).
    max_header_bytes_total: int = setting(16 * 1024 * 1024, 65_536, 1024 * 1024 * 1024)
    # A request's body must arrive whole this long after its headers; past it 408 REQUEST_TIMEOUT, connection closed.
    body_read_timeout_ms: int = setting(30_000, 100, 3_600_000)
    # Longest a reply may wait for its client to take what was sent (the connection's buffers full); past it the
    # connection is closed: an event stream whose client stopped reading ends.
    send_stall_timeout_ms: int = setting(30_000, 100, 3_600_000)
    # Seconds an idle keep-alive connection is kept open between requests (uvicorn's timeout_keep_alive).
    keep_alive_timeout_s: int = setting(5, 1, 3_600)
    # Open HTTP connections; a connection past it is answered 503 TOO_MANY_CONNECTIONS (health checks still served).
    max_connections: int = setting(12_000, 1, 1_000_000)
    # File descriptors kept for the store's files, logs and replication beyond max_connections, when the
    # soft RLIMIT_NOFILE is raised at start to fit both.
    reserved_fds: int = setting(1_024, 0, 1_000_000)
    # Transactions: longest a check-back to a producer's check URL takes in all (connect, request, whole reply).
    transaction_check_timeout_ms: int = setting(3_000, 100, 60_000)
    # Transactions: check-backs under way at once at most (each holds one thread of the check pool).
    transaction_check_concurrency: int = setting(8, 1, 256)
    # Transactions: check-backs under way at once for one producer group (within transaction_check_concurrency).
    transaction_check_group_concurrency: int = setting(2, 1, 256)
    # PEM certificate (chain) served over HTTPS and on the HA link; none: plain HTTP and TCP.
    tls_cert_file: str | None = setting(None)
    # PEM private key of tls_cert_file.
    tls_key_file: str | None = setting(None)
    # PEM CA that must sign every client's certificate (mutual TLS, HTTP and HA link); none: no client certificate asked.
    tls_client_ca_file: str | None = setting(None)
    # ACL file (TOML accounts, token hashes, permissions; docs/security.md); empty: no tokens, the API is open.
    acl_file: str = setting("")
    # Without an ACL, allow listening on a non-loopback address (an open broker reachable by others).
    insecure_open: bool = setting(False)
    # With an ACL, serve /metrics without a token (for a scraper that cannot send one).
    metrics_public: bool = setting(False)
    # Topics /metrics exports per-topic series for (the first by name); the rest are counted in tidemq_metrics_topics_omitted.
    metrics_max_topics: int = setting(1_000, 0, 100_000)
    # Group and topic pairs /metrics exports tidemq_group_* series for (the first by name); the rest are counted.
    metrics_max_groups: int = setting(1_000, 0, 100_000)
    # With an ACL, how often (at most) the ACL file's mtime and size are looked at to reload it.
    acl_reload_interval_ms: int = setting(1_000, 10, 3_600_000)
    # Hosts push subscriptions may deliver to: names or IP literals, "*.example.com" for its subdomains (env
    # TIDEMQ_PUSH_ALLOWED_HOSTS, comma-separated); empty: no push target is allowed until an operator lists one.
    push_allowed_hosts: list[str] = setting(factory=list)
    # Push subscriptions the broker holds at most; past it a new one is 409 PUSH_LIMIT_REACHED.
    push_max_subscriptions: int = setting(100, 0, 10_000)
    # The largest max_in_flight a push subscription may ask for (its deliveries under way at once).
    push_max_in_flight: int = setting(64, 1, 1_024)
    # The largest timeout_ms a push subscription may ask for: one delivery's whole time, connect to status line.
    push_max_timeout_ms: int = setting(30_000, 100, 600_000)
    # Connections open at once to one push target (scheme, host and port), shared by its subscriptions.
    push_max_connections_per_host: int = setting(16, 1, 1_024)
    # Largest message body a push delivery posts (after decompression); a larger message goes to the group's dead-letter topic.
    push_max_body_bytes: int = setting(4 * MIB, 1, GIB)
    # How long a push subscription with nothing to deliver waits before it receives again (an arrival wakes it sooner).
    push_idle_poll_ms: int = setting(1_000, 10, 60_000)
    # The store's configuration (the `[store]` table).
    store: MessageStoreConfig = field(default_factory=MessageStoreConfig)
    # Replication role and endpoints (the `[ha]` table, --role and the other replication options).
    ha: HASettings = field(default_factory=HASettings)
    # Cluster membership on etcd (the `[cluster]` table, --cluster-etcd, --cluster-name, --broker-name).
    cluster: ClusterSettings = field(default_factory=ClusterSettings)

    def validate(self) -> BrokerSettings:
        """Check every setting's type and range (then the store's and replication's); ConfigInvalid names the first broken one."""
        check_fields(self, "broker")
        bad_host = next((h for h in self.push_allowed_hosts if not allowed_host_entry(h)), None)
        if bad_host is not None:
            raise ConfigInvalid(f"push_allowed_hosts: {bad_host!r} is not a host name, an IP address or *.domain")
        if self.max_held_pulls >= self.max_connections:
            raise ConfigInvalid("max_held_pulls must be below max_connections (a held pull holds a connection)")
        self.store.store_path_root_dir = self.store_dir
        if self.flush is not None:
            self.store.flush_disk_type = FLUSH_MODES[self.flush]
        self.ha.tls = self.tls_files()
        self.cluster.validate()
        if self.cluster.enabled and self.ha.role != "standalone":
            raise ConfigInvalid(
                "--role / TIDEMQ_ROLE / [ha] role is refused with --cluster-etcd: a cluster's roles come from its elections"
            )
        self.ha.validate()
        role = self.ha.broker_role()
        if self.store.broker_role is not BrokerRole.ASYNC_MASTER and self.store.broker_role is not role:
            # The role has one source of truth: a [store] broker_role may only repeat it.
            detail = f"[store] broker_role {self.store.broker_role.value} contradicts the replication role {self.ha.role!r} ({role.value})"
            raise ConfigInvalid(detail + "; set the role with --role / TIDEMQ_ROLE / [ha] role")
        self.ha.apply_to(self.store)
        if (self.ha.role == "master" or self.cluster.enabled) and self.ha.advertised_http_address is None:
            self.ha.advertised_http_address = self.http_url()
        if self.cluster.enabled:
            self.store.broker_role = BrokerRole.SLAVE  # no put is accepted before this broker wins its group's election
            self._store_host_from_advertised_address()
        self.store.validate()
        return self

    def http_url(self) -> str:
        """The HTTP server's own base URL, from its listen address and port."""
        scheme = "https" if self.tls_cert_file is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    def bound_to(self, port: int) -> None:
        """The port the kernel chose for `port = 0`; what was derived from the port (the advertised
        HTTP address, and in a cluster the store port) follows it."""
        assert self.port == 0 and port > 0
        derived = self.ha.advertised_http_address == self.http_url()
        self.port = port
        if derived:
            self.ha.advertised_http_address = self.http_url()
        if self.cluster.enabled and self.store.store_port == 0:
            self.store.store_port = port

    def _store_host_from_advertised_address(self) -> None:
        """In a cluster, offset message ids must name one broker: left at their defaults, the store host and port
        become the advertised HTTP address's, when its host is an IPv4 address (docs/cluster.md)."""
        defaults = MessageStoreConfig()
        if (self.store.store_host, self.store.store_port) != (defaults.store_host, defaults.store_port):
            return
        address = urlsplit(self.ha.advertised_http_address or "")
        try:
            ipaddress.IPv4Address(address.hostname or "")
        except ValueError:
            return
        self.store.store_host = str(address.hostname)
        default_port = 443 if address.scheme == "https" else 80
        self.store.store_port = address.port if address.port is not None else default_port  # 0 until bound_to

    def tls_files(self) -> TLSFiles | None:
        """The TLS files, loaded once to prove they are usable; None without TLS; ConfigInvalid when incomplete or unusable."""
        if self.tls_cert_file is None and self.tls_key_file is None:
            if self.tls_client_ca_file is not None:
                raise ConfigInvalid("tls_client_ca_file needs tls_cert_file and tls_key_file (mutual TLS is TLS first)")
            return None
        if self.tls_cert_file is None or self.tls_key_file is None:
            raise ConfigInvalid("TLS needs both tls_cert_file and tls_key_file")
        return TLSFiles(self.tls_cert_file, self.tls_key_file, self.tls_client_ca_file, self.ha.ha_tls_ca_file).check()


BROKER_KEYS = {f.name for f in dataclasses.fields(BrokerSettings)} - {"store", "ha", "cluster"}
HA_KEYS = {f.name for f in dataclasses.fields(HASettings)}
CLUSTER_KEYS = {f.name for f in dataclasses.fields(ClusterSettings)}
TABLES = ("broker", "store", "ha", "cluster")


def load_toml(path: str) -> dict[str, Any]:
    """Read a TOML settings file; ConfigInvalid when it cannot be read or has unknown tables."""
    data = read_toml(path, "config file")
    unknown = set(data) - set(TABLES)
    if unknown:
        raise ConfigInvalid(f"unknown table(s) in {path}: {', '.join(sorted(unknown))} (expected [broker], [store], [ha] and [cluster])")
    return data


def build_ha_settings(table: dict[str, Any], overrides: dict[str, Any]) -> HASettings:
    """HASettings from the `[ha]` table and explicit overrides (strings from options or the environment win)."""
    unknown = set(table) - HA_KEYS
    if unknown:
        raise ConfigInvalid(f"unknown ha setting(s): {', '.join(sorted(unknown))}")
    given = {k: v for k, v in overrides.items() if v is not None}
    port = given.get("ha_port")
    if isinstance(port, str):  # options and the environment are strings; a TOML value must be an integer
        if not port.isascii() or not port.isdigit():
            raise ConfigInvalid(f"ha port must be a port number, not {port!r}")
        given["ha_port"] = int(port)
    values = {**table, **given}
    return HASettings(**values)


def build_settings(
    toml: dict[str, Any] | None,
    overrides: dict[str, Any],
    ha_overrides: dict[str, Any] | None = None,
    cluster_overrides: dict[str, Any] | None = None,
) -> BrokerSettings:
    """Combine a parsed TOML file and explicit overrides (None values are skipped)."""
    toml = toml or {}
    broker = dict(toml.get("broker", {}))
    unknown = set(broker) - BROKER_KEYS
    if unknown:
        raise ConfigInvalid(f"unknown broker setting(s): {', '.join(sorted(unknown))}")
    broker.update({k: v for k, v in overrides.items() if v is not None})
    store = MessageStoreConfig.from_dict(dict(toml.get("store", {})))
    ha = build_ha_settings(dict(toml.get("ha", {})), ha_overrides or {})
    cluster_table = dict(toml.get("cluster", {}))
    unknown = set(cluster_table) - CLUSTER_KEYS
    if unknown:
        raise ConfigInvalid(f"unknown cluster setting(s): {', '.join(sorted(unknown))}")
    cluster = ClusterSettings(**{**cluster_table, **(cluster_overrides or {})})
    return BrokerSettings(**broker, store=store, ha=ha, cluster=cluster).validate()
