"""InSyncReplicas: a cluster master's in-sync set (RocketMQ 5's SyncStateSet), kept by its cluster node's rounds.

The set is the master and `published`, the slaves named in etcd's `groups/{g}/sync_state`; only
they may be elected next (cluster/election.py). Under SYNC replication every put waits for every
slave the GroupTransferService requires (`published` and the slaves joining), so each member
holds every acknowledged put. The rules, one `update` per round:

- a slave is *caught up* at time t when it acknowledged the log's end as it was at t (the ends of
  the last `in_sync_lag_max_ms` are sampled once a round, so a slave under a steady load, always a
  frame behind, is caught up with the end of a round ago);
- it *lags* when it has not been caught up for `in_sync_lag_max_ms` (a dead, paused or cut-off
  slave; one whose connection is gone is caught up no more);
- shrink: a lagging member is removed from etcd's set FIRST (a write guarded by the leader key's
  revision) and only then released from the puts' wait, so no put is acknowledged without it while
  etcd still names it;
- grow: a slave streaming from this master, registered in its group and caught up with the end of
  one round ago, first *joins*: from then on puts wait for it too (`require`, which returns `J`, the
  highest offset acknowledged without it); once it acknowledged `J` it holds every acknowledged put
  and is written to etcd. A joining slave that lags is released without any write (etcd never named
  it). Under ASYNC replication nothing waits, and a caught-up slave is written at once.

Invariant (SYNC): `published` is a subset of the transfer service's `required`, so any broker etcd
names holds every put acknowledged so far, and a new master, which was such a member and stopped
acknowledging before it campaigned, leaves this master unable to acknowledge anything more.
"""

from __future__ import annotations

import bisect
import collections
import logging
from collections.abc import Callable

from ha.group_transfer_service import GroupTransferService

log = logging.getLogger("tidemq.cluster")

# (the new set of slaves, sorted) -> True once etcd holds it; False when this broker no longer leads.
Publish = Callable[[list[str]], bool]


class InSyncReplicas:
    def __init__(self, master_id: str, lag_max_ms: int, transfer: GroupTransferService | None) -> None:
        self.master_id = master_id
        self.lag_max_s = lag_max_ms / 1000.0
        self.transfer = transfer  # None under ASYNC replication: nothing waits for the slaves
        self.published: frozenset[str] = frozenset()  # the slaves etcd names (the set less this master)
        # broker id -> the offset it must acknowledge before it is published. `published` and `joining` are replaced
        # whole, never changed in place: status() reads them from the HTTP threads.
        self.joining: dict[str, int] = {}
        self.caught_up_at: dict[str, float] = {}
        self._samples: collections.deque[tuple[float, int]] = collections.deque()  # (time, log end), ends never fall
        self.shrinks_total = 0
        self.expansions_total = 0

    def size(self) -> int:
        """Members of the set, this master included."""
        return len(self.published) + 1

    def update(self, now: float, end: int, acks: dict[str, int], members: set[str], publish: Publish) -> None:
        """One round: sample the log's end, note who caught up, then join, publish and drop (module docstring).

        `acks`: the streaming slaves' acknowledged offsets by broker id; `members`: the group's registered brokers.
        EtcdError from `publish` propagates: nothing is released then."""
        previous = self._sample(now, end)
        for broker_id, acked in acks.items():
            reached = self._reached_at(acked)
            if reached is not None:
                self.caught_up_at[broker_id] = max(self.caught_up_at.get(broker_id, reached), reached)
        for broker_id in acks:
            known = broker_id in self.published or broker_id in self.joining
            if known or broker_id == self.master_id or broker_id not in members:
                continue
            if self.caught_up_at.get(broker_id, -1.0) >= previous:
                self._join(broker_id)
        for broker_id in [b for b in self.joining if self._lags(b, now)]:
            self.joining = {b: j for b, j in self.joining.items() if b != broker_id}
            if self.transfer is not None:
                self.transfer.release({broker_id})
            log.info("%s fell behind while joining the in-sync set", broker_id)
        ready = {b for b, target in self.joining.items() if acks.get(b, -1) >= target}
        dropped = {b for b in self.published if self._lags(b, now)}
        wanted = (self.published - dropped) | ready
        if wanted == self.published or not publish(sorted(wanted)):
            return
        self.published = frozenset(wanted)
        self.joining = {b: j for b, j in self.joining.items() if b not in ready}
        if dropped and self.transfer is not None:
            self.transfer.release(dropped)  # only now: etcd no longer names them
        self.shrinks_total += bool(dropped)
        self.expansions_total += bool(ready)
        log.info("in-sync set: %s%s", ", ".join([self.master_id, *sorted(wanted)]), f" (dropped {sorted(dropped)})" if dropped else "")

    def _join(self, broker_id: str) -> None:
        if self.transfer is None:
            self.joining = {**self.joining, broker_id: -1}  # ASYNC: nothing is acknowledged by slaves, ready at once
            return
        target = self.transfer.require(broker_id)
        self.joining = {**self.joining, broker_id: target}
        log.info("%s caught up: puts wait for it from now on; it joins the in-sync set once it holds offset %d", broker_id, target)

    def _sample(self, now: float, end: int) -> float:
        """Record (now, end); returns the time of the previous sample (now when there is none)."""
        samples = self._samples
        previous = samples[-1][0] if samples else now
        samples.append((now, end))
        while len(samples) > 2 and samples[1][0] < now - self.lag_max_s:
            samples.popleft()  # the oldest kept sample stays older than the lag window
        return previous

    def _reached_at(self, acked: int) -> float | None:
        """The latest sampled time whose log end `acked` reached; None when it reached none."""
        samples = self._samples
        ends = [e for _, e in samples]
        i = bisect.bisect_right(ends, acked)
        return samples[i - 1][0] if i > 0 else None

    def _lags(self, broker_id: str, now: float) -> bool:
        return now - self.caught_up_at.get(broker_id, -1e18) > self.lag_max_s

    def status(self) -> dict[str, object]:
        return {
            "in_sync": sorted(self.published),
            "joining": sorted(self.joining.copy()),
            "in_sync_shrinks_total": self.shrinks_total,
            "in_sync_expansions_total": self.expansions_total,
        }
