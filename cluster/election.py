"""Election: one broker's side of its group's election on etcd, and the fence that keeps a deposed master quiet.

- The master holds `groups/{g}/leader` under its own lease of `lease_ttl_s` and renews it every
  `lease_renew_interval_ms`. After each renewal it may accept puts until
  `sent + lease_ttl_s - fence_margin_ms`, where `sent` is when the renewal was sent: etcd's expiry
  counts from when it got the renewal, which is later, so the fence falls before any successor can
  be elected. `may_accept_puts()` compares the monotonic clock with that deadline on every put, so
  a master paused (SIGSTOP) past it refuses puts the moment it runs again, before any thread has
  noticed anything.
- Losing etcd is not losing the lease: when a renewal fails because no etcd endpoint answers while
  the lease was still valid, a SYNC_MASTER keeps accepting puts (its slave's acknowledgement is
  still required for every put, and a slave stops acknowledging before it campaigns); no election
  can happen without etcd. An ASYNC_MASTER fences at the deadline regardless.
- A campaign is one transaction: the leader key must be absent and the epoch key unchanged since
  it was read; it writes the leader key (under a new lease), epoch E+1, the epoch's start offset
  (the candidate's log end) and a fresh sync state naming the new master.
- Eligibility: a group with no sync state yet (new) elects anyone; otherwise only the last master
  or a member of its in-sync set (`eligible`). Every eligible broker holds every acknowledged put
  (cluster/in_sync_replicas.py); among the eligible live ones, the one whose log goes furthest
  (ties: the smallest broker id) campaigns and the others defer to it (`rival`), so the new master
  also keeps the most of what was stored but not yet acknowledged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from cluster.etcd_client import EtcdClient, EtcdUnavailable
from cluster.registry import GroupView, Keys
from cluster.settings import ClusterSettings

log = logging.getLogger("tidemq.cluster")


def eligible(group: GroupView, broker_id: str) -> bool:
    """May `broker_id` be elected in `group` (it holds every acknowledged put)?"""
    state = group.sync_state
    if state is None:
        return True
    return broker_id == state.get("master") or broker_id in state.get("in_sync", [])


# Registration roles of brokers that may campaign: a master's or a deposed master's record outlives its process.
CANDIDATE_ROLES = frozenset({"starting", "slave", "candidate"})


def rival(group: GroupView, broker_id: str, own_offset: int) -> str | None:
    """An eligible live broker that should be elected before `broker_id`, whose log ends at `own_offset`; None: none."""
    best: tuple[int, str] | None = None
    for other, record in group.records.items():
        if other == broker_id or record.get("role") not in CANDIDATE_ROLES or not eligible(group, other):
            continue
        offset = int(record.get("confirmed_offset", -1))
        if offset > own_offset or (offset == own_offset and other < broker_id):
            if best is None or (-offset, other) < (-best[0], best[1]):
                best = (offset, other)
    return best[1] if best is not None else None


class Election:
    def __init__(self, etcd: EtcdClient, keys: Keys, settings: ClusterSettings, broker_id: str, sync: bool) -> None:
        self.etcd = etcd
        self.keys = keys
        self.settings = settings
        self.group = settings.broker_name
        self.broker_id = broker_id
        self.sync = sync
        self.lease = 0
        self.epoch = 0
        self.leader_revision = 0  # create_revision of our leader key: guards the sync state we write
        self.deadline = 0.0  # monotonic: the master accepts puts until then
        self.etcd_lost = False  # a renewal found no etcd while the lease was valid
        self.next_renewal = 0.0

    @property
    def is_leader(self) -> bool:
        return self.lease != 0

    def may_accept_puts(self) -> bool:
        if self.lease == 0:
            return False
        return time.monotonic() < self.deadline or (self.etcd_lost and self.sync)

    def holds_lease(self) -> bool:
        """Whether the lease is surely this broker's now: renewed within the fence (`may_accept_puts` without the
        etcd-lost allowance, which only writes get: each still needs the acknowledgement of every slave of the set,
        which a successor gives no longer; a read needs no acknowledgement, so only the lease keeps it current)."""
        return self.lease != 0 and time.monotonic() < self.deadline

    def campaign(self, group: GroupView, start_offset: int, leader_value: dict[str, Any]) -> bool:
        """Try to become the group's master at epoch E+1 starting at `start_offset`; True when won."""
        sent = time.monotonic()
        lease = self.etcd.grant(self.settings.lease_ttl_s)
        epoch = group.current_epoch + 1
        epoch_compare = ("mod", group.epoch.mod_revision) if group.epoch is not None else ("create", 0)
        revision = self.etcd.put_if(
            [(self.keys.leader(self.group), "create", 0), (self.keys.epoch(self.group), *epoch_compare)],
            [
                (self.keys.leader(self.group), {**leader_value, "broker": self.broker_id, "epoch": epoch}, lease),
                (self.keys.epoch(self.group), {"epoch": epoch}, 0),
                (self.keys.epoch_entry(self.group, epoch), {"epoch": epoch, "broker": self.broker_id, "start_offset": start_offset}, 0),
                (self.keys.sync_state(self.group), {"epoch": epoch, "master": self.broker_id, "in_sync": []}, 0),
            ],
        )
        if not revision:
            self.etcd.revoke(lease)
            return False
        self.lease, self.epoch, self.leader_revision = lease, epoch, revision
        self.deadline = sent + (self.settings.lease_ttl_s * 1000 - self.settings.fence_margin_ms) / 1000.0
        self.next_renewal = sent + self.settings.lease_renew_interval_ms / 1000.0
        self.etcd_lost = False
        log.info("elected master of %s at epoch %d (log starts the epoch at %d)", self.group, epoch, start_offset)
        return True

    def renew_if_due(self) -> bool:
        """Renew the lease when due; False once etcd says it is gone (this broker is no longer the master)."""
        now = time.monotonic()
        if self.lease == 0 or now < self.next_renewal:
            return self.lease != 0
        self.next_renewal = now + self.settings.lease_renew_interval_ms / 1000.0
        try:
            ttl = self.etcd.keepalive(self.lease)
        except EtcdUnavailable as exc:
            if not self.etcd_lost and now < self.deadline:
                log.warning("etcd unreachable while master of %s (%s); keeping the role, no election can happen", self.group, exc)
                self.etcd_lost = True
            return True
        if ttl <= 0:
            log.warning("the election lease of %s is gone: this broker is no longer its master", self.group)
            self.lease = 0
            return False
        if self.etcd_lost:
            log.info("etcd reachable again; master of %s at epoch %d", self.group, self.epoch)
        self.etcd_lost = False
        self.deadline = now + (self.settings.lease_ttl_s * 1000 - self.settings.fence_margin_ms) / 1000.0
        return True

    def publish_in_sync(self, in_sync: list[str]) -> bool:
        """Write the slaves that may succeed this master, guarded by our leader key's revision: True once written,
        False when the key is gone or another's (EtcdError when etcd does not answer)."""
        if self.lease == 0:
            return False
        value = {"epoch": self.epoch, "master": self.broker_id, "in_sync": sorted(in_sync)}
        guard = [(self.keys.leader(self.group), "create", self.leader_revision)]
        return bool(self.etcd.put_if(guard, [(self.keys.sync_state(self.group), value, 0)]))

    def resign(self) -> None:
        """Drop the lease (and with it the leader key) so the group elects at once; best effort."""
        lease, self.lease = self.lease, 0
        if lease:
            try:
                self.etcd.revoke(lease)
            except Exception as exc:  # etcd may be gone; the lease then expires by itself
                log.warning("could not revoke the election lease: %s", exc)
