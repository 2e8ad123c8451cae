"""Consumer groups' settings for group (POP) consumption, kept in `config/subscriptionGroup.json`.

The file has RocketMQ's shape (`subscriptionGroupTable` of SubscriptionGroupConfig objects with
RocketMQ's field names, and a `dataVersion`), so a RocketMQ broker reads the groups tidemq made.
`retryMaxTimes` is the group's max reconsume times; `consumeMessageOrderly` makes it a FIFO group.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

from store.data_version import data_version_counter, versioned_document
from store.errors import ConfigInvalid
from store.json_file import read_json, write_json_atomically

FILE_NAME = "subscriptionGroup.json"
# RocketMQ's SubscriptionGroupConfig.retryMaxTimes default, and the bound a group may set.
DEFAULT_MAX_RECONSUME_TIMES = 16
MAX_RECONSUME_TIMES_LIMIT = 1_000


@dataclass(slots=True, frozen=True)
class SubscriptionGroup:
    name: str
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES
    fifo: bool = False
    attributes: tuple[tuple[str, str], ...] = ()  # RocketMQ 5's group attributes, as read (kept across updates)

    def to_rocketmq(self) -> dict[str, Any]:
        """The group as RocketMQ's SubscriptionGroupConfig serializes it (its defaults for the fields tidemq does not use)."""
        return {
            "groupName": self.name, "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
            "consumeMessageOrderly": self.fifo, "retryQueueNums": 1, "retryMaxTimes": self.max_reconsume_times, "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True, "groupSysFlag": 0, "consumeTimeoutMinute": 15,
            "attributes": dict(self.attributes),
        }  # fmt: skip

    @classmethod
    def from_rocketmq(cls, name: str, doc: Any) -> SubscriptionGroup:
        if type(doc) is not dict:
            raise ConfigInvalid(f"{FILE_NAME}: group {name!r} is not an object")
        times = doc.get("retryMaxTimes", DEFAULT_MAX_RECONSUME_TIMES)
        orderly = doc.get("consumeMessageOrderly", False)
        attributes = doc.get("attributes") or {}  # absent (RocketMQ 4) or null: none
        if type(times) is not int or not 0 <= times <= MAX_RECONSUME_TIMES_LIMIT or type(orderly) is not bool:
            raise ConfigInvalid(f"{FILE_NAME}: group {name!r} has an invalid retryMaxTimes or consumeMessageOrderly")
        if type(attributes) is not dict or not all(type(v) is str for v in attributes.values()):
            raise ConfigInvalid(f"{FILE_NAME}: group {name!r} has attributes that are not a map of strings")
        return cls(name, times, orderly, tuple(attributes.items()))


class SubscriptionGroupManager:
    """The groups; changes are rare and persisted at once (atomic file replace)."""

    def __init__(self, config_dir: str) -> None:
        self.path = f"{config_dir}/{FILE_NAME}"
        self._groups: dict[str, SubscriptionGroup] = {}
        self._counter = 0
        self._lock = threading.Lock()  # serializes changes and their persistence (rare, off the hot path)

    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        table = data.get("subscriptionGroupTable") if type(data) is dict else None
        if type(table) is not dict:
            raise ConfigInvalid(f"{self.path}: no subscriptionGroupTable object")
        self._groups = {name: SubscriptionGroup.from_rocketmq(name, doc) for name, doc in table.items()}
        self._counter = data_version_counter(data)

    def get(self, name: str) -> SubscriptionGroup | None:
        return self._groups.get(name)

    def all(self) -> list[SubscriptionGroup]:
        return sorted(self._groups.values(), key=lambda g: g.name)

    def put(self, group: SubscriptionGroup) -> bool:
        """Create or update a group; True when it was created."""
        assert 0 <= group.max_reconsume_times <= MAX_RECONSUME_TIMES_LIMIT
        with self._lock:
            current = self._groups.get(group.name)
            created = current is None
            if current is not None and not group.attributes:
                group = replace(group, attributes=current.attributes)  # the API does not set them: keep RocketMQ's
            self._groups[group.name] = group
            self._persist_locked()
        return created

    def delete(self, name: str) -> bool:
        with self._lock:
            if self._groups.pop(name, None) is None:
                return False
            self._persist_locked()
        return True

    def _persist_locked(self) -> None:
        self._counter += 1
        table = {name: g.to_rocketmq() for name, g in self._groups.items()}
        write_json_atomically(self.path, versioned_document("subscriptionGroupTable", table, self._counter))
