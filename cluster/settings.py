"""ClusterSettings: a broker's place in a cluster of broker groups on etcd (docs/cluster.md).

Without `cluster_etcd` the broker is the single process it always was and nothing here is used.
With it, the broker's role comes from its group's election, so `--role` is refused; every broker
of a group is started alike (`--broker-name`, `--ha-port`, `--replication`,
`--advertised-http-address`). Invariant: `validate()` has passed before the cluster starts.
"""

from __future__ import annotations

import argparse
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from core import ConfigInvalid, check_fields, setting
from ha.settings import parse_address

# option dest -> environment variable.
ENV_NAMES = {"cluster_etcd": "TIDEMQ_CLUSTER_ETCD", "cluster_name": "TIDEMQ_CLUSTER_NAME", "broker_name": "TIDEMQ_BROKER_NAME"}
# Cluster and broker group names become etcd key segments.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class ClusterSettings:
    # etcd client URLs, comma-separated ("http://127.0.0.1:2379,..."); empty: no cluster, a single broker.
    cluster_etcd: str = setting("")
    # Name of the cluster: the etcd key prefix /tidemq/{cluster_name}/ of its records.
    cluster_name: str = setting("tidemq")
    # The broker group (RocketMQ's brokerName): a master and its slaves, all started with the same name.
    broker_name: str = setting("")
    # TTL of a master's election lease; a group whose master stops renewing it elects another after it.
    lease_ttl_s: int = setting(5, 2, 300)
    # A master renews its election lease this often (well under the TTL).
    lease_renew_interval_ms: int = setting(500, 50, 60_000)
    # A master stops accepting puts this long before its lease could expire at etcd (fencing slack).
    fence_margin_ms: int = setting(500, 0, 60_000)
    # HA address ("host:port") the group's slaves connect to while this broker is master; empty: ha_host:ha_port.
    advertised_ha_address: str = setting("")
    # Longest wait for one etcd request before the next endpoint is tried.
    etcd_request_timeout_ms: int = setting(1_000, 50, 60_000)
    # How long a starting broker keeps asking etcd for the cluster before it refuses to start (exit 3); 0: asks once.
    etcd_start_wait_ms: int = setting(5_000, 0, 600_000)
    # How often a broker refreshes its registration record and reads the cluster's records and leaders.
    refresh_interval_ms: int = setting(200, 20, 60_000)
    # SYNC groups: brokers of the in-sync set, the master included, a master needs to accept writes (else 503 NOT_ENOUGH_REPLICAS).
    min_in_sync_replicas: int = setting(1, 1, 64)
    # A slave of the in-sync set that has not caught up with the master's log for this long is dropped from it
    # (RocketMQ 5's haMaxTimeSlaveNotCatchup): below sync_flush_timeout_ms less etcd_request_timeout_ms, so a put
    # waiting on a dead slave is answered after the shrink rather than timing out.
    in_sync_lag_max_ms: int = setting(3_000, 50, 600_000)
    # TTL of a broker's registration record (renewed every third of it; a dead broker's record goes with it).
    registration_ttl_s: int = setting(10, 2, 3_600)
    # Longest a forwarded request may take at its owner (a forwarded long-poll's wait_ms is added).
    forward_timeout_ms: int = setting(15_000, 100, 600_000)
    # Largest request body a broker forwards to another (larger ones are answered 413).
    max_forward_body_bytes: int = setting(32 * 1024 * 1024, 1024, 1024 * 1024 * 1024)
    # Forwarded requests in flight at once; past it a request to forward is answered 503 FORWARD_FAILED.
    max_forwards_in_flight: int = setting(1_024, 1, 100_000)
    # CA certificates (PEM) forwarding trusts for other brokers' HTTPS addresses; empty: the system's.
    forward_ca_file: str = setting("")

    @property
    def enabled(self) -> bool:
        return bool(self.cluster_etcd)

    def endpoints(self) -> list[str]:
        return [u.strip() for u in self.cluster_etcd.split(",") if u.strip()]

    def validate(self) -> ClusterSettings:
        """Types and ranges, then the relations; ConfigInvalid names the first broken one."""
        check_fields(self, "cluster")
        if not self.enabled:
            return self
        for url in self.endpoints():
            if not url.startswith(("http://", "https://")):
                raise ConfigInvalid(f"cluster_etcd URLs must be http:// or https:// URLs, not {url!r}")
        if not NAME.match(self.cluster_name):
            raise ConfigInvalid(f"cluster_name must be 1-64 letters, digits, '.', '_' or '-', not {self.cluster_name!r}")
        if not NAME.match(self.broker_name):
            raise ConfigInvalid("a cluster broker needs --broker-name (1-64 letters, digits, '.', '_' or '-'), the name of its group")
        if self.advertised_ha_address:
            parse_address(self.advertised_ha_address)
        ttl_ms = self.lease_ttl_s * 1000
        if self.lease_renew_interval_ms * 2 + self.fence_margin_ms >= ttl_ms:
            raise ConfigInvalid("lease_renew_interval_ms * 2 + fence_margin_ms must stay below lease_ttl_s")
        if self.etcd_request_timeout_ms >= ttl_ms:
            raise ConfigInvalid("etcd_request_timeout_ms must be below lease_ttl_s")
        self.forward_tls()  # an unreadable CA file refuses the start, not the first forward
        return self

    def forward_tls(self) -> ssl.SSLContext:
        """The TLS context forwarding verifies other brokers with; ConfigInvalid when forward_ca_file cannot be loaded."""
        try:
            return ssl.create_default_context(cafile=self.forward_ca_file or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigInvalid(f"forward_ca_file {self.forward_ca_file!r} cannot be loaded: {exc}") from None


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster (docs/cluster.md)")
    group.add_argument(
        "--cluster-etcd", dest="cluster_etcd", help="etcd URL[,URL...]: join a cluster; roles come from elections (env TIDEMQ_CLUSTER_ETCD)"
    )
    group.add_argument(
        "--cluster-name", dest="cluster_name", help="cluster name, the etcd key prefix (default tidemq; env TIDEMQ_CLUSTER_NAME)"
    )
    group.add_argument("--broker-name", dest="broker_name", help="the broker group this broker belongs to (env TIDEMQ_BROKER_NAME)")


def cli_values(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """The cluster options given on the command line or in the environment (absent ones left out)."""
    values = {}
    for dest, env_name in ENV_NAMES.items():
        value = getattr(args, dest, None) or environ.get(env_name) or None
        if value is not None:
            values[dest] = value
    return values
