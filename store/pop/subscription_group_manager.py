"""Consumer groups' settings for group (POP) consumption, kept in `config/subscriptionGroup.json`.

Each change is a state record (store/state/state_log.py), replicated and recovered with the log; the
file is the table's local snapshot. The file has RocketMQ's shape (`subscriptionGroupTable` of SubscriptionGroupConfig objects with
RocketMQ's field names, and a `dataVersion`), so a RocketMQ broker reads the groups tidemq made.
`retryMaxTimes` is the group's max reconsume times; `consumeMessageOrderly` makes it a FIFO group.
A group's SQL92 filter is `expressionType` ("SQL92") and `expression`, the field names of RocketMQ 5's
SimpleSubscriptionData, present only when the group has one; RocketMQ's SubscriptionGroupConfig has
no such fields and fastjson ignores them, so a RocketMQ broker still reads the file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from core.errors import ConfigInvalid
from store.disk.json_file import read_json, write_json_atomically
from store.filter.sql_filter import SqlFilter, filter_problem
from store.state.data_version import data_version_counter, versioned_document
from store.state.state_table import STATE_OFFSET_FIELD, StateKind, StateTable

FILE_NAME = "subscriptionGroup.json"
# RocketMQ's SubscriptionGroupConfig.retryMaxTimes default, and the bound a group may set.
DEFAULT_MAX_RECONSUME_TIMES = 16
MAX_RECONSUME_TIMES_LIMIT = 1_000
# RocketMQ's ExpressionType.SQL92: the one expression type a group's filter has.
EXPRESSION_TYPE_SQL92 = "SQL92"


@dataclass(slots=True, frozen=True)
class SubscriptionGroup:
    name: str
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES
    fifo: bool = False
    attributes: tuple[tuple[str, str], ...] = ()  # RocketMQ 5's group attributes, as read (kept across updates)
    filter_sql: str | None = None  # an SQL92 expression every receive of the group also applies

    @property
    def sql_filter(self) -> SqlFilter | None:
        """The group's filter, parsed (the parse is cached)."""
        return SqlFilter.parse(self.filter_sql) if self.filter_sql is not None else None

    def to_rocketmq(self) -> dict[str, Any]:
        """The group as RocketMQ's SubscriptionGroupConfig serializes it (its defaults for the fields tidemq does not use)."""
        doc: dict[str, Any] = {
            "groupName": self.name, "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
            "consumeMessageOrderly": self.fifo, "retryQueueNums": 1, "retryMaxTimes": self.max_reconsume_times, "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True, "groupSysFlag": 0, "consumeTimeoutMinute": 15,
            "attributes": dict(self.attributes),
        }  # fmt: skip
        if self.filter_sql is not None:
            doc["expressionType"], doc["expression"] = EXPRESSION_TYPE_SQL92, self.filter_sql
        return doc

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
        expression = doc.get("expression")
        if expression is None and "expressionType" not in doc:
            return cls(name, times, orderly, tuple(attributes.items()))
        problem = filter_problem(expression)
        if doc.get("expressionType") != EXPRESSION_TYPE_SQL92 or problem is not None:
            raise ConfigInvalid(f"{FILE_NAME}: group {name!r} has an invalid filter ({problem or 'expressionType is not SQL92'})")
        return cls(name, times, orderly, tuple(attributes.items()), expression)


class SubscriptionGroupManager(StateTable):
    """The groups; each change is a state record (store/state/state_log.py), so slaves and a new master hold
    them too; subscriptionGroup.json is the local snapshot (with `stateLogOffset`)."""

    kind = StateKind.SUBSCRIPTION_GROUPS

    def __init__(self, config_dir: str) -> None:
        super().__init__()
        self.path = f"{config_dir}/{FILE_NAME}"
        self._groups: dict[str, SubscriptionGroup] = {}
        self._counter = 0

    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        table = data.get("subscriptionGroupTable") if type(data) is dict else None
        if type(table) is not dict:
            raise ConfigInvalid(f"{self.path}: no subscriptionGroupTable object")
        self._groups = {name: SubscriptionGroup.from_rocketmq(name, doc) for name, doc in table.items()}
        self._counter = data_version_counter(data)
        covered = data.get(STATE_OFFSET_FIELD, 0)
        self.loaded(covered if type(covered) is int else 0)

    def get(self, name: str) -> SubscriptionGroup | None:
        return self._groups.get(name)

    def all(self) -> list[SubscriptionGroup]:
        with self._lock:  # changed in place under it
            groups = list(self._groups.values())
        return sorted(groups, key=lambda g: g.name)

    def put(self, group: SubscriptionGroup) -> bool:
        """Create or update a group (blocking: recorded durably); True when it was created.
        FilterInvalid, with nothing recorded, when its filter is not an SQL92 expression."""
        assert 0 <= group.max_reconsume_times <= MAX_RECONSUME_TIMES_LIMIT
        if group.filter_sql is not None:
            SqlFilter.parse(group.filter_sql)  # refused before anything is recorded
        current = self._groups.get(group.name)
        created = current is None
        if current is not None and not group.attributes:
            group = replace(group, attributes=current.attributes)  # the API does not set them: keep RocketMQ's
        self.record({"put": group.to_rocketmq()})
        return created

    def delete(self, name: str) -> bool:
        if name not in self._groups:
            return False
        self.record({"del": name})
        return True

    # StateTable --------------------------------------------------------------------------------

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        doc = payload.get("put")
        if type(doc) is dict:
            group = SubscriptionGroup.from_rocketmq(str(doc.get("groupName")), doc)
            self._groups[group.name] = group
        name = payload.get("del")
        if type(name) is str:
            self._groups.pop(name, None)

    def rows_locked(self) -> list[Any]:
        return [g.to_rocketmq() for g in self._groups.values()]

    def row_count_locked(self) -> int:
        return len(self._groups)

    def restore_locked(self, rows: list[Any]) -> None:
        self._groups = {}
        for doc in rows:
            self.apply_locked({"put": doc})

    def persist(self) -> None:
        """Write subscriptionGroup.json from the table (a new dataVersion each time, as RocketMQ's ConfigManager)."""
        with self._lock:
            self._counter += 1
            table = {name: g.to_rocketmq() for name, g in self._groups.items()}
            covered, counter = self.covered, self._counter
            self.dirty = False
        document = versioned_document("subscriptionGroupTable", table, counter)
        document[STATE_OFFSET_FIELD] = covered
        try:
            write_json_atomically(self.path, document)
        except OSError:
            self.dirty = True
            raise
