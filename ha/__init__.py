"""Master/slave replication of the commitlog (RocketMQ 4.x's HA; docs/ha.md describes it).

Wiring into a server is: `settings.apply_to(store_config)` before the store is built, then
`node = attach(store, settings)` before `store.start()`, then `node.status()` for /v1/store
and `node.metrics()` for /metrics. The store starts and stops the services it is given.
"""

from __future__ import annotations

import socket
from typing import Any

from core import ServiceThread
from ha.errors import HAError, HAStartFailed
from ha.group_transfer_service import GroupTransferService
from ha.ha_client import HAClient
from ha.ha_service import HAService, listen_for_slaves
from ha.settings import HASettings, add_cli_arguments, from_args, is_loopback
from store import BrokerRole, MessageStore

__all__ = [
    "HAClient",
    "HAError",
    "HANode",
    "HAService",
    "HASettings",
    "HAStartFailed",
    "add_cli_arguments",
    "attach",
    "from_args",
    "is_loopback",
    "listen_for_slaves",
    "start_node",
    "stop_node",
]


class HANode:
    """The replication side of one broker: a master's HAService (and GroupTransferService) or a slave's HAClient."""

    def __init__(self, settings: HASettings, service: HAService | None = None, client: HAClient | None = None) -> None:
        assert (service is None) != (client is None), "a node is a master or a slave"
        self.settings = settings
        self.service = service
        self.client = client

    @property
    def role(self) -> str:
        return self.settings.role

    def services(self) -> list[ServiceThread]:
        """The threads of this node in start order (a master's transfer service before its accept service)."""
        if self.client is not None:
            return [self.client]
        assert self.service is not None
        return [self.service] if self.transfer is None else [self.transfer, self.service]

    @property
    def transfer(self) -> GroupTransferService | None:
        return self.service.transfer if self.service is not None else None

    def master_http_address(self) -> str | None:
        """Where producers should go (for a slave's NOT_MASTER reply)."""
        if self.client is not None:
            return self.client.master_http_address
        return self.settings.advertised_http_address

    def status(self) -> dict[str, Any]:
        """Role, peer, connection state, acknowledged offset, bytes behind, divergence; JSON-ready."""
        if self.client is not None:
            return self.client.status()
        assert self.service is not None
        out = self.service.status()
        transfer = self.transfer
        if transfer is not None:
            out["sync_waiting"] = transfer.pending()
            out["sync_timeouts_total"] = transfer.timeouts_total
            out["sync_slave_not_available_total"] = transfer.not_available_total
        return out

    def metrics(self) -> list[tuple[str, str, str, float]]:
        """(name, type, help, value) for /metrics; absent values are left out."""
        s = self.status()
        rows: list[tuple[str, str, str, float]] = [
            (
                "tidemq_ha_connected",
                "gauge",
                "1 when replication has a live connection",
                float(s["connection_state"] in ("connected", "streaming")),
            ),
            ("tidemq_ha_diverged", "gauge", "1 when a slave's log diverged from the master's", float(bool(s["diverged"]))),
            ("tidemq_ha_acknowledged_offset", "gauge", "Commitlog offset a slave acknowledged", float(s["acknowledged_offset"])),
        ]
        if s.get("bytes_behind") is not None:
            rows.append(("tidemq_ha_bytes_behind", "gauge", "Commitlog bytes the slave lacks", float(s["bytes_behind"])))
        if self.client is not None:
            rows.append(("tidemq_ha_connects_total", "counter", "Connection attempts to the master", float(s["connects_total"])))
            rows.append(("tidemq_ha_received_bytes_total", "counter", "Commitlog bytes received from the master", float(s["bytes_total"])))
        else:
            rows.append(
                (
                    "tidemq_ha_slaves",
                    "gauge",
                    "Slaves streaming from this master",
                    float(len([x for x in s["slaves"] if x["state"] == "streaming"])),
                )
            )
            rows.append(("tidemq_ha_refused_total", "counter", "Slave handshakes refused", float(s["refused_total"])))
            rows.append(
                (
                    "tidemq_ha_auth_refused_total",
                    "counter",
                    "HA peers dropped before authenticating (ha_secret proof or TLS handshake failed)",
                    float(s["auth_refused_total"]),
                )
            )
            if "sync_waiting" in s:
                rows.append(("tidemq_ha_sync_waiting", "gauge", "SYNC_MASTER puts waiting for a slave", float(s["sync_waiting"])))
                rows.append(
                    (
                        "tidemq_ha_sync_timeouts_total",
                        "counter",
                        "SYNC_MASTER puts answered FLUSH_SLAVE_TIMEOUT",
                        float(s["sync_timeouts_total"]),
                    )
                )
                rows.append(
                    (
                        "tidemq_ha_sync_slave_not_available_total",
                        "counter",
                        "SYNC_MASTER puts answered SLAVE_NOT_AVAILABLE",
                        float(s["sync_slave_not_available_total"]),
                    )
                )
        return rows


def attach(store: MessageStore, settings: HASettings) -> HANode | None:
    """Register the replication services with a loaded-or-not, not yet started store.

    Returns None for a standalone broker. A master listens on its HA port before this
    returns (HAStartFailed when it cannot). The store's role must already match
    (`settings.apply_to(config)` before the store was built).
    """
    settings.validate()
    assert store.config.broker_role is settings.broker_role(), "apply the HA settings to the store config before building the store"
    if settings.role == "standalone":
        return None
    store.set_replicated(True)
    node = _build(store, settings)
    for service in node.services():
        store.register_service(service)
    return node


def start_node(store: MessageStore, settings: HASettings, listener: socket.socket | None = None) -> HANode:
    """Start a master's or a slave's replication beside a running store (a cluster's role change).

    The store's role is set to the settings' first (`set_broker_role`); stop the node with
    `stop_node` before the store shuts down. A master takes `listener` (from `listen_for_slaves`, which the
    master then owns) or binds its HA port now (HAStartFailed when it cannot).
    """
    settings.validate()
    assert settings.role != "standalone", "a node is a master or a slave"
    store.set_broker_role(settings.broker_role())
    store.set_replicated(True)
    node = _build(store, settings, listener)
    for service in node.services():
        service.start()
    return node


def stop_node(store: MessageStore, node: HANode) -> None:
    """Stop what `start_node` started (last started first) and drop a master's replication wait."""
    for service in reversed(node.services()):
        service.shutdown()
    if node.transfer is not None:
        store.set_replication_waiter(None)


def _build(store: MessageStore, settings: HASettings, listener: socket.socket | None = None) -> HANode:
    if settings.role == "slave":
        return HANode(settings, client=HAClient(store, settings))
    service = HAService(store, settings)
    if store.config.broker_role is BrokerRole.SYNC_MASTER:
        transfer = GroupTransferService(
            store.config.sync_flush_timeout_ms,
            settings.max_pending_transfers,
            service.slave_ok,
            service.wakeup_writers,
            min_acks=settings.in_sync_min_acks,
        )
        service.transfer = transfer
        store.set_replication_waiter(transfer.waiter)
    service.bind(listener)
    return HANode(settings, service=service)
