"""The cluster's records in etcd: the key layout, and ClusterView, one consistent read of them all.

Keys, under `/tidemq/{cluster_name}/`:
- `brokers/{broker_name}/{broker id}`: each broker's registration record, under its own lease
  (cluster/registration.py); the broker id is its advertised HTTP address, URL-quoted;
- `groups/{broker_name}/leader`: the group's master, under the master's election lease
  (cluster/election.py): `{"broker", "epoch", "http_address", "ha_address"}`;
- `groups/{broker_name}/epoch`: the group's last epoch, `{"epoch": E}` (no lease);
- `groups/{broker_name}/epochs/{E:012d}`: `{"epoch", "broker", "start_offset"}`, the epoch history;
- `groups/{broker_name}/sync_state`: `{"epoch", "master", "in_sync": [broker ids]}`, the replicas
  that may be elected next (written by the master);
- `topics/{topic}`: `{"topic", "broker_name"}`, the group a new topic was placed in
  (cluster/topic_claims.py; no lease: it outlives the brokers).

ClusterView is built from one range read of the prefix (one etcd revision), so a view never mixes
two moments. It is immutable; the cluster node replaces it whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from cluster.epoch_file import Epoch
from cluster.etcd_client import KeyValue


class Keys:
    def __init__(self, cluster_name: str) -> None:
        self.root = f"/tidemq/{cluster_name}/"

    def broker(self, group: str, broker_id: str) -> str:
        return f"{self.root}brokers/{group}/{quote(broker_id, safe='')}"

    def leader(self, group: str) -> str:
        return f"{self.root}groups/{group}/leader"

    def epoch(self, group: str) -> str:
        return f"{self.root}groups/{group}/epoch"

    def epoch_entry(self, group: str, epoch: int) -> str:
        return f"{self.root}groups/{group}/epochs/{epoch:012d}"

    def sync_state(self, group: str) -> str:
        return f"{self.root}groups/{group}/sync_state"

    def topic(self, topic: str) -> str:
        return f"{self.root}topics/{quote(topic, safe='')}"


@dataclass
class GroupView:
    name: str
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # broker id -> registration record
    leader: KeyValue | None = None
    epoch: KeyValue | None = None
    epochs: list[Epoch] = field(default_factory=list)
    sync_state: dict[str, Any] | None = None

    @property
    def master_id(self) -> str | None:
        return str(self.leader.value["broker"]) if self.leader is not None else None

    @property
    def current_epoch(self) -> int:
        return int(self.epoch.value["epoch"]) if self.epoch is not None else 0

    def master_record(self) -> dict[str, Any] | None:
        return self.records.get(self.master_id) if self.master_id is not None else None

    def topics(self) -> dict[str, int]:
        """The group's topics and queue counts: its master's, else any member's (slaves mirror them)."""
        record = self.master_record()
        if record is None and self.records:
            record = next(iter(self.records.values()))
        return dict(record["topics"]) if record is not None else {}


@dataclass(frozen=True)
class ClusterView:
    groups: dict[str, GroupView]
    revision: int = 0
    claims: dict[str, str] = field(default_factory=dict)  # topic -> the group it was placed in

    def holders(self, topic: str) -> list[str]:
        """The groups whose records list the topic, by name."""
        return [name for name in sorted(self.groups) if topic in self.groups[name].topics()]

    def group(self, name: str) -> GroupView:
        return self.groups.get(name) or GroupView(name)


def parse_view(keys: Keys, kvs: list[KeyValue], revision: int = 0) -> ClusterView:
    groups: dict[str, GroupView] = {}
    claims: dict[str, str] = {}
    for kv in kvs:
        parts = kv.key[len(keys.root) :].split("/")
        if not isinstance(kv.value, dict):
            continue
        if parts[0] == "topics" and len(parts) == 2:
            claims[str(kv.value.get("topic"))] = str(kv.value.get("broker_name"))
            continue
        if len(parts) < 3:
            continue
        kind, name, rest = parts[0], parts[1], parts[2:]
        g = groups.setdefault(name, GroupView(name))
        if kind == "brokers":
            g.records[str(kv.value.get("broker_id"))] = kv.value
        elif kind == "groups" and rest == ["leader"]:
            g.leader = kv
        elif kind == "groups" and rest == ["epoch"]:
            g.epoch = kv
        elif kind == "groups" and rest == ["sync_state"]:
            g.sync_state = kv.value
        elif kind == "groups" and rest[0] == "epochs":
            g.epochs.append(Epoch(int(kv.value["epoch"]), int(kv.value["start_offset"])))
    return ClusterView(groups, revision, claims)
