"""Registration: a broker's record in etcd, kept under its own lease while the broker runs.

The record (`brokers/{broker_name}/{broker id}`, cluster/registry.py) says: the broker id (its
advertised HTTP address), its group, HTTP and HA addresses, role (master / slave / starting),
epoch (the master's it follows or leads), confirmed offset (its commitlog end: everything up to it
is stored here, and a slave has acknowledged it to its master), and its topics with their queue
counts. It is rewritten when it changed (checked every `refresh_interval_ms`) and lives under a
lease of `registration_ttl_s`, renewed every third of it, so a dead broker's record disappears by
itself; a clean stop revokes the lease at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from cluster.etcd_client import EtcdClient
from cluster.registry import Keys
from cluster.settings import ClusterSettings
from store import SYSTEM_TOPICS, MessageStore

log = logging.getLogger("tidemq.cluster")


def topics_of(store: MessageStore) -> dict[str, int]:
    return {t.topic_name: t.read_queue_nums for t in store.topic_configs() if t.topic_name not in SYSTEM_TOPICS}


class Registration:
    def __init__(self, etcd: EtcdClient, keys: Keys, settings: ClusterSettings, broker_id: str, ha_address: str) -> None:
        self.etcd = etcd
        self.settings = settings
        self.key = keys.broker(settings.broker_name, broker_id)
        self.broker_id = broker_id
        self.ha_address = ha_address
        self.lease = 0
        self._written: dict[str, Any] | None = None
        self._next_renewal = 0.0

    def record(self, store: MessageStore, role: str, epoch: int) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id,
            "broker_name": self.settings.broker_name,
            "http_address": self.broker_id,
            "ha_address": self.ha_address,
            "role": role,
            "epoch": epoch,
            "confirmed_offset": store.commit_log_max_offset(),
            "topics": topics_of(store),
        }

    def refresh(self, record: dict[str, Any]) -> None:
        """Renew the lease when due (a new one when it is gone) and write the record when it changed; EtcdError when etcd fails."""
        now = time.monotonic()
        if now >= self._next_renewal:
            if self.lease and self.etcd.keepalive(self.lease) <= 0:
                self.lease, self._written = 0, None
            self._next_renewal = now + self.settings.registration_ttl_s / 3
        if not self.lease:
            self.lease, self._written = self.etcd.grant(self.settings.registration_ttl_s), None
        if record != self._written:
            self.etcd.put(self.key, record, self.lease)
            self._written = record

    def withdraw(self) -> None:
        lease, self.lease = self.lease, 0
        if lease:
            try:
                self.etcd.revoke(lease)
            except Exception as exc:  # etcd may be gone; the record then expires with its lease
                log.warning("could not withdraw the registration: %s", exc)
