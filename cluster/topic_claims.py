"""TopicClaims: the group a new topic is created in, agreed through etcd before any broker creates it.

Without it two brokers of different groups that receive the first write of a topic in the same
registration round (`refresh_interval_ms`) would each create it, and the topic would span both
by accident. The first write of a topic no group holds claims `topics/{topic}` in one etcd
transaction that succeeds only while the key does not exist: the winner's group creates it,
every other broker forwards the write there. A claim has no lease (it outlives its brokers) and
stays after the topic is deleted, so a topic created again lands in the same group. A topic
meant to span groups is still created on each group's master directly (with the forwarded
header), which claims nothing.
"""

from __future__ import annotations

from cluster.etcd_client import EtcdClient
from cluster.registry import Keys

# Claims remembered here until the view shows them (a new topic is written many times before it is).
MAX_REMEMBERED_CLAIMS = 10_000


class TopicClaims:
    def __init__(self, etcd: EtcdClient, keys: Keys, group_name: str) -> None:
        self.etcd = etcd
        self.keys = keys
        self.group_name = group_name
        self._known: dict[str, str] = {}

    def known(self, topic: str) -> str | None:
        return self._known.get(topic)

    def claim(self, topic: str) -> str:
        """The group the topic belongs to: this broker's when its claim won, else the earlier claimant's.

        Blocking (one or two etcd requests); EtcdError when etcd does not answer.
        """
        key = self.keys.topic(topic)
        value = {"topic": topic, "broker_name": self.group_name}
        if self.etcd.put_if([(key, "create", 0)], [(key, value, 0)]):
            owner = self.group_name
        else:
            found = self.etcd.get(key)
            owner = str(found.value["broker_name"]) if found is not None and isinstance(found.value, dict) else self.group_name
        if len(self._known) >= MAX_REMEMBERED_CLAIMS:
            self._known.clear()
        self._known[topic] = owner
        return owner
