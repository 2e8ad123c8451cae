"""ClusterNode: one broker's membership of its cluster, run as one ServiceThread.

Each round (every `refresh_interval_ms`, and every `lease_renew_interval_ms` on a master):
1. a master renews its election lease (cluster/election.py); etcd saying the lease is gone deposes it;
2. one range read of the cluster's keys gives the new ClusterView (routes and forwarding read it);
3. a master checks it still leads and updates its in-sync set (cluster/in_sync_replicas.py: a
   shrink is written to etcd before any put is acknowledged without the slave dropped); a slave
   follows its group's master (its HAClient re-pointed when the master or epoch changes), records
   the master's epoch in the epoch file once it streams from it, or, when the group has no master
   and it is eligible, campaigns from its second leaderless round on (the first one publishes its
   log's end), unless an eligible live broker's log goes further (it defers to it, at most
   `lease_ttl_s`);
4. the registration record is rewritten.
When etcd does not answer, the round stops at the failing call: roles stay as they are and no
campaign happens (there is no election without etcd).

Role changes: a slave stops its HAClient before it campaigns (it no longer acknowledges the old
master); when it wins it starts its master side (`ha.start_node`: store role, SYNC wait, an
HAService on the HA port it has listened on since its start). A master that is deposed refuses
puts at once (store role SLAVE), resigns, stops replication and asks for a process restart
(`on_restart`): at start, `prepare()` cuts the log back to the new epoch's start
(cluster/epoch_file.py) before the store recovers, and the broker rejoins as a slave. A slave whose
master says its log diverged restarts the same way.

Shutdown order (`stop()`, before the store shuts down): the thread ends, the master resigns (its
group elects at once), replication stops, the registration is withdrawn.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
from collections.abc import Callable

from cluster.election import Election, eligible, rival
from cluster.epoch_file import EpochFile, truncation_offset
from cluster.etcd_client import EtcdClient, EtcdError
from cluster.in_sync_replicas import InSyncReplicas
from cluster.registration import Registration
from cluster.registry import ClusterView, GroupView, Keys, parse_view
from cluster.settings import ClusterSettings
from core import ServiceThread
from ha import HANode, HASettings, HAStartFailed, listen_for_slaves, start_node, stop_node
from store import BrokerRole, MessageStore

log = logging.getLogger("tidemq.cluster")
START_RETRY_PAUSE_S = 0.5  # between two reads of the cluster at start while etcd does not answer
NO_MASTER_DETAIL = "this master's election lease may have expired; it accepts no writes until its group has a master"
# httpx logs every request at INFO: several etcd requests a second would drown the broker's own lines.
logging.getLogger("httpx").setLevel(logging.WARNING)


class ClusterNode(ServiceThread):
    def __init__(self, settings: ClusterSettings, ha: HASettings, store: MessageStore, store_dir: str) -> None:
        super().__init__("ClusterNode")
        assert ha.advertised_http_address, "BrokerSettings.validate() sets the advertised HTTP address in cluster mode"
        self.settings = settings
        self.ha_base = ha
        self.store = store
        self.broker_id = ha.advertised_http_address
        # The HA port is held from the start (listening; connections wait in its backlog until this broker is master
        # and its HAService accepts them): a port taken by then fails the start-up (HAStartFailed), never an election
        # won, and `ha_port` 0 becomes the port the kernel picked, kept by a restart (app/cli.py).
        self.ha_listener: socket.socket | None = listen_for_slaves(ha)
        ha.ha_port = self.ha_listener.getsockname()[1]
        self.ha_address = settings.advertised_ha_address or f"{ha.ha_host}:{ha.ha_port}"
        self.etcd = EtcdClient(settings.endpoints(), settings.etcd_request_timeout_ms)
        self.keys = Keys(settings.cluster_name)
        self.sync = ha.replication == "sync"
        self.election = Election(self.etcd, self.keys, settings, self.broker_id, sync=self.sync)
        self.registration = Registration(self.etcd, self.keys, settings, self.broker_id, self.ha_address)
        self.epochs = EpochFile(store_dir)
        self.view = ClusterView({})
        self.role = "starting"
        self.node: HANode | None = None
        self.following: tuple[str, int] | None = None  # (master id, epoch) the HAClient streams from
        self.etcd_error: str | None = None  # the last round's etcd failure, None while etcd answers
        self.restart_reason: str | None = None
        self.in_sync = InSyncReplicas(self.broker_id, settings.in_sync_lag_max_ms, None)  # replaced at each election won
        self._leaderless_since: float | None = None  # monotonic: when this broker first saw its group without a master
        self._deferred_to: str | None = None
        lag_bound = settings.in_sync_lag_max_ms + settings.etcd_request_timeout_ms
        if self.sync and lag_bound >= store.config.sync_flush_timeout_ms:
            log.warning(
                "in_sync_lag_max_ms + etcd_request_timeout_ms (%d ms) is not below sync_flush_timeout_ms (%d ms): "
                "puts waiting on a dead slave time out (504) before the in-sync set shrinks",
                lag_bound,
                store.config.sync_flush_timeout_ms,
            )
        self.elections_won_total = 0
        self.forwarded_total = 0  # counted by cluster/forwarding.py
        self.forward_failed_total = 0
        # Set by the app: told of each replication node change (for /v1/store), and asked to restart the process.
        self.on_node_change: Callable[[HANode | None], None] = lambda node: None
        self.on_restart: Callable[[str], None] = lambda reason: None

    @property
    def group_name(self) -> str:
        return self.settings.broker_name

    # Start and stop ----------------------------------------------------------------------

    def prepare(self) -> None:
        """Before the store loads: read the cluster, cut a deposed master's tail; EtcdError when etcd does not answer
        within `etcd_start_wait_ms` (a loaded machine's etcd can miss one request's timeout and answer the next)."""
        deadline = time.monotonic() + self.settings.etcd_start_wait_ms / 1000
        while True:
            try:
                self.view = self._read_view()
                break
            except EtcdError as e:
                if time.monotonic() + START_RETRY_PAUSE_S >= deadline:
                    raise
                log.warning("the cluster's etcd did not answer (%s); asking again (etcd_start_wait_ms)", e)
                time.sleep(START_RETRY_PAUSE_S)
        group = self.view.group(self.group_name)
        cut = truncation_offset(self.epochs.last(), group.epochs)
        if cut is not None:
            log.warning("the group %s moved on to a newer epoch: this broker's log is cut back to offset %d", self.group_name, cut)
            self.store.set_recovery_limit(cut)
        if group.leader is not None and group.master_id == self.broker_id:
            # This broker's previous process: its lease would only delay the election.
            self.etcd.revoke(group.leader.lease)

    def stop(self) -> None:
        """Blocking: end the thread, resign, stop replication, withdraw the record (the module docstring's order)."""
        self.shutdown()
        self.store.set_broker_role(BrokerRole.SLAVE)
        self.election.resign()
        self._stop_node()
        if self.ha_listener is not None:  # never master: no HAService took it
            self.ha_listener.close()
        self.registration.withdraw()
        self.etcd.close()

    def may_accept_puts(self) -> bool:
        return self.write_refusal() is None

    def serves_consumer_state(self) -> bool:
        """Whether this broker may answer a read of consumer state (offsets, groups) from its own tables.

        Only the master may (a slave applies its master's records a moment after it holds them), once its role is
        "master": that is set after the store took over, having applied every state record it replicated, so a
        request forwarded here between the campaign and the take-over does not read tables still behind the log.
        And only while it holds its lease (`Election.holds_lease`): a master cut off from etcd may keep taking
        writes under SYNC replication, but a successor elected meanwhile takes commits this broker never sees."""
        return self.role == "master" and self.election.holds_lease()

    def write_refusal(self) -> tuple[str, str] | None:
        """(problem code, detail) when this broker, as master, must refuse a write now; None when it may take it.

        Checked before anything is stored: the lease fence (NO_MASTER), then, under SYNC replication,
        the in-sync set's size, this master included, against `min_in_sync_replicas` (NOT_ENOUGH_REPLICAS)."""
        if not self.election.may_accept_puts():
            return "NO_MASTER", NO_MASTER_DETAIL
        size, needed = self.in_sync.size(), self.settings.min_in_sync_replicas
        if self.sync and size < needed:
            return "NOT_ENOUGH_REPLICAS", (
                f"the in-sync set of {self.group_name} has {size} broker(s), min_in_sync_replicas is {needed}; "
                "nothing was stored, retry once a slave has caught up"
            )
        return None

    # The loop ----------------------------------------------------------------------------

    def run(self) -> None:
        while not self.is_stopped():
            if self.restart_reason is None:
                try:
                    self.round()
                    if self.etcd_error is not None:
                        log.info("etcd answers again")
                    self.etcd_error = None
                except EtcdError as exc:
                    if self.etcd_error is None:
                        log.warning("etcd failed (%s); roles kept as they are, no election until it answers", exc)
                    self.etcd_error = str(exc)
            interval = self.settings.refresh_interval_ms
            if self.election.is_leader:
                interval = min(interval, self.settings.lease_renew_interval_ms)
            self.wait_for_running(interval)

    def round(self) -> None:
        if self.election.is_leader and not self.election.renew_if_due():
            self._deposed("its election lease expired")
            return
        self.view = self._read_view()
        group = self.view.group(self.group_name)
        if self.role == "master":
            if group.leader is None:  # its lease ended at etcd (renewals that did not arrive in time)
                self._deposed("its leader key is gone: the election lease expired at etcd")
                return
            if group.leader.create_revision != self.election.leader_revision:
                self._deposed("another broker leads the group")
                return
            self._update_in_sync(group)
        else:
            self._follow_or_campaign(group)
        self.registration.refresh(self.registration.record(self.store, self.role, self.epoch()))

    def _read_view(self) -> ClusterView:
        return parse_view(self.keys, self.etcd.prefix(self.keys.root))

    def epoch(self) -> int:
        """The epoch this broker leads, or that of the master it streams from; 0 otherwise."""
        if self.role == "master":
            return self.election.epoch
        client = self.node.client if self.node is not None else None
        return client.master_epoch if client is not None and client.state == "STREAMING" else 0

    # Slave side --------------------------------------------------------------------------

    def _follow_or_campaign(self, group: GroupView) -> None:
        leader = group.leader
        if leader is None:
            if self._may_campaign(group):
                self._campaign(group)
            return
        self._leaderless_since, self._deferred_to = None, None
        master_id, epoch = str(leader.value["broker"]), int(leader.value["epoch"])
        if master_id == self.broker_id:
            return  # this broker's previous process's key, revoked by prepare(): it disappears shortly
        if self.following != (master_id, epoch):
            self._follow(leader.value)
            return
        client = self.node.client if self.node is not None else None
        if client is None:
            return
        if client.state == "DIVERGED":
            self._restart(f"its log diverged from the master's ({client.reason})")
        elif client.state == "STREAMING" and client.master_epoch == epoch:
            starts = {e.epoch: e.start_offset for e in group.epochs}
            self.epochs.append(epoch, starts.get(epoch, 0))

    def _may_campaign(self, group: GroupView) -> bool:
        """Eligible, past its first leaderless round, and no eligible live broker's log goes further (for a `lease_ttl_s`)."""
        now = time.monotonic()
        if self._leaderless_since is None:
            self._leaderless_since = now  # this round's registration publishes this log's end for the others to compare
            return False
        if not eligible(group, self.broker_id):
            return False
        ahead = rival(group, self.broker_id, self.store.commit_log_max_offset())
        if ahead is not None and now - self._leaderless_since < self.settings.lease_ttl_s:
            if ahead != self._deferred_to:
                log.info("deferring to %s, whose log goes further, in the election of %s", ahead, self.group_name)
                self._deferred_to = ahead
            return False
        if ahead is not None:
            log.warning("%s did not campaign within lease_ttl_s: campaigning although its log goes further", ahead)
        return True

    def _follow(self, leader: dict[str, object]) -> None:
        self._stop_node()
        epoch = int(str(leader["epoch"]))
        settings = dataclasses.replace(
            self.ha_base, role="slave", master_ha_address=str(leader["ha_address"]), master_http_address=str(leader["http_address"])
        )
        self._start_node(settings, epoch)
        self.role = "slave"
        self.following = (str(leader["broker"]), epoch)
        log.info("following %s, master of %s at epoch %d", leader["broker"], self.group_name, epoch)

    def _campaign(self, group: GroupView) -> None:
        self._stop_node()  # no acknowledgement reaches the old master from here on
        self.following = None
        self.role = "candidate"
        start = self.store.commit_log_max_offset()
        if not self.election.campaign(group, start, {"http_address": self.broker_id, "ha_address": self.ha_address}):
            return  # another broker won: the next round follows it
        self.epochs.append(self.election.epoch, start)
        self.elections_won_total += 1
        settings = dataclasses.replace(self.ha_base, role="master", advertised_http_address=self.broker_id)
        settings.in_sync_min_acks = self.settings.min_in_sync_replicas - 1 if self.sync else None
        listener, self.ha_listener = self.ha_listener, None  # the master's HAService owns it from here
        try:
            self._start_node(settings, self.election.epoch, listener)
        except HAStartFailed as exc:
            log.error("elected but the HA port cannot be bound (%s); resigning", exc)
            self.election.resign()
            self.store.set_broker_role(BrokerRole.SLAVE)
            return
        assert self.node is not None
        self.in_sync = InSyncReplicas(self.broker_id, self.settings.in_sync_lag_max_ms, self.node.transfer)
        self.role = "master"

    # Master side -------------------------------------------------------------------------

    def _update_in_sync(self, group: GroupView) -> None:
        service = self.node.service if self.node is not None else None
        acks = service.member_acks() if service is not None else {}
        end = self.store.commit_log_max_offset()
        self.in_sync.update(time.monotonic(), end, acks, set(group.records), self.election.publish_in_sync)

    def _deposed(self, reason: str) -> None:
        self.store.set_broker_role(BrokerRole.SLAVE)  # first: no put is accepted from here on
        self.role = "deposed"
        self.election.resign()
        self._stop_node()
        self._restart(f"no longer the master of {self.group_name}: {reason}")

    # Replication and restarts -----------------------------------------------------------

    def _start_node(self, settings: HASettings, epoch: int, listener: socket.socket | None = None) -> None:
        settings.tls = self.ha_base.tls  # not dataclass fields: replace() does not carry them
        settings.epoch = epoch
        self.node = start_node(self.store, settings, listener)
        self.on_node_change(self.node)

    def _stop_node(self) -> None:
        node, self.node = self.node, None
        if node is not None:
            self.on_node_change(None)
            stop_node(self.store, node)
            self.store.set_broker_role(BrokerRole.SLAVE)

    def _restart(self, reason: str) -> None:
        if self.restart_reason is None:
            self.restart_reason = reason
            log.warning("restarting: %s", reason)
            self.on_restart(reason)

    def metrics(self) -> list[tuple[str, str, str, float]]:
        """(name, type, help, value) for /metrics."""
        return [
            (
                "tidemq_cluster_master",
                "gauge",
                "1 while this broker is its group's master and accepts writes",
                float(self.may_accept_puts()),
            ),
            ("tidemq_cluster_epoch", "gauge", "The election epoch this broker leads or follows (0: none)", float(self.epoch())),
            ("tidemq_cluster_etcd_up", "gauge", "1 when the last round of etcd requests succeeded", float(self.etcd_error is None)),
            ("tidemq_cluster_elections_won_total", "counter", "Elections this broker won", float(self.elections_won_total)),
            ("tidemq_cluster_forwarded_total", "counter", "Requests forwarded to another broker", float(self.forwarded_total)),
            (
                "tidemq_cluster_forward_failed_total",
                "counter",
                "Forwarded requests the owner did not answer, or refused for too many in flight",
                float(self.forward_failed_total),
            ),
        ]

    def status(self) -> dict[str, object]:
        group = self.view.group(self.group_name)
        return {
            "cluster_name": self.settings.cluster_name,
            "broker_name": self.group_name,
            "broker_id": self.broker_id,
            "role": self.role,
            "ha_address": self.ha_address,
            "ha_listen_address": f"{self.ha_base.ha_host}:{self.ha_base.ha_port}",
            "epoch": self.epoch(),
            "master": group.master_id,
            "in_sync": sorted(self.in_sync.published) if self.role == "master" else (group.sync_state or {}).get("in_sync", []),
            "joining": sorted(self.in_sync.joining) if self.role == "master" else [],
            "min_in_sync_replicas": self.settings.min_in_sync_replicas,
            "accepting_puts": self.role == "master" and self.may_accept_puts(),
            "write_refusal": refusal[0] if self.role == "master" and (refusal := self.write_refusal()) is not None else None,
            "etcd_error": self.etcd_error,
            "restart_reason": self.restart_reason,
        }
