"""Push subscriptions: which group's messages the broker POSTs to which URL, kept in `config/pushSubscription.json`.

A push subscription is a consumer group whose receives the broker makes itself (app/push_service.py
delivers them); its definition is broker state: each change is a state record (store/state/state_log.py),
so slaves and a new master hold the same subscriptions and a restart or a failover keeps delivering.
The file is the table's local snapshot (with `stateLogOffset`); it holds the subscriptions' signing
secrets, so it is written with mode 0600 (the commitlog holds them too: the store directory is as
secret as the subscriptions' secrets).

The table checks the shapes of what it holds; the front end checks what a client may ask for (its
limits, the allowed hosts) before a subscription reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from core.errors import ConfigInvalid
from store.disk.json_file import read_json, write_bytes_atomically
from store.state.state_table import STATE_OFFSET_FIELD, StateKind, StateTable

FILE_NAME = "pushSubscription.json"
# Bounds of a subscription's fields as the table holds them (the front end's settings may narrow them).
MAX_URL_BYTES = 2_048
MAX_SECRET_BYTES = 256
MAX_IN_FLIGHT_LIMIT = 1_024
MAX_TIMEOUT_MS_LIMIT = 600_000


@dataclass(slots=True, frozen=True)
class PushSubscription:
    group: str
    topic: str
    url: str
    max_in_flight: int
    timeout_ms: int
    secret: str
    created_ms: int

    def to_row(self) -> dict[str, Any]:
        return {
            "group": self.group, "topic": self.topic, "url": self.url, "maxInFlight": self.max_in_flight,
            "timeoutMs": self.timeout_ms, "secret": self.secret, "createdMs": self.created_ms,
        }  # fmt: skip

    @classmethod
    def from_row(cls, row: Any) -> PushSubscription:
        """A row of the file or of a record; ConfigInvalid when a field is missing or out of shape."""
        if type(row) is not dict:
            raise ConfigInvalid(f"{FILE_NAME}: a subscription is not an object")
        group, topic, url, secret = row.get("group"), row.get("topic"), row.get("url"), row.get("secret")
        in_flight, timeout_ms, created_ms = row.get("maxInFlight"), row.get("timeoutMs"), row.get("createdMs")
        if not (type(group) is str and type(topic) is str and type(url) is str and type(secret) is str and group and topic and url):
            raise ConfigInvalid(f"{FILE_NAME}: subscription {str(group)[:100]!r} lacks its group, topic, url or secret")
        if not (type(in_flight) is int and type(timeout_ms) is int and type(created_ms) is int):
            raise ConfigInvalid(f"{FILE_NAME}: subscription {group[:100]!r} lacks maxInFlight, timeoutMs or createdMs")
        sub = cls(group, topic, url, in_flight, timeout_ms, secret, created_ms)
        problem = sub.shape_problem()
        if problem is not None:
            raise ConfigInvalid(f"{FILE_NAME}: subscription {sub.group[:100]!r}: {problem}")
        return sub

    def shape_problem(self) -> str | None:
        """Why the table cannot hold this subscription; None when it can."""
        if len(self.url.encode()) > MAX_URL_BYTES or len(self.secret.encode()) > MAX_SECRET_BYTES:
            return f"url or secret longer than {MAX_URL_BYTES} / {MAX_SECRET_BYTES} bytes"
        if not 1 <= self.max_in_flight <= MAX_IN_FLIGHT_LIMIT or not 1 <= self.timeout_ms <= MAX_TIMEOUT_MS_LIMIT:
            return f"maxInFlight must be in 1..{MAX_IN_FLIGHT_LIMIT} and timeoutMs in 1..{MAX_TIMEOUT_MS_LIMIT}"
        return None


class PushSubscriptionTable(StateTable):
    """The push subscriptions by group; each change a state record, the file the local snapshot."""

    kind = StateKind.PUSH_SUBSCRIPTIONS

    def __init__(self, config_dir: str) -> None:
        super().__init__()
        self.path = f"{config_dir}/{FILE_NAME}"
        self._subscriptions: dict[str, PushSubscription] = {}

    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        rows = data.get("subscriptions") if type(data) is dict else None
        if type(rows) is not list:
            raise ConfigInvalid(f"{self.path}: no subscriptions array")
        self._subscriptions = {}
        for row in rows:
            sub = PushSubscription.from_row(row)
            self._subscriptions[sub.group] = sub
        covered = data.get(STATE_OFFSET_FIELD, 0)
        self.loaded(covered if type(covered) is int else 0)

    def get(self, group: str) -> PushSubscription | None:
        with self._lock:
            return self._subscriptions.get(group)

    def all(self) -> list[PushSubscription]:
        with self._lock:
            subs = list(self._subscriptions.values())
        return sorted(subs, key=lambda s: s.group)

    def put(self, sub: PushSubscription) -> bool:
        """Create or replace the group's subscription (blocking: recorded durably); True when it was created."""
        assert sub.shape_problem() is None, sub.shape_problem()
        created = self.get(sub.group) is None
        self.record({"put": sub.to_row()})
        return created

    def delete(self, group: str) -> bool:
        if self.get(group) is None:
            return False
        self.record({"del": group})
        return True

    # StateTable --------------------------------------------------------------------------------

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        row = payload.get("put")
        if row is not None:
            sub = PushSubscription.from_row(row)
            self._subscriptions[sub.group] = sub
        group = payload.get("del")
        if type(group) is str:
            self._subscriptions.pop(group, None)

    def rows_locked(self) -> list[Any]:
        return [s.to_row() for s in self._subscriptions.values()]

    def row_count_locked(self) -> int:
        return len(self._subscriptions)

    def restore_locked(self, rows: list[Any]) -> None:
        self._subscriptions = {}
        for row in rows:
            self.apply_locked({"put": row})

    def persist(self) -> None:
        """Write pushSubscription.json (mode 0600: it holds the signing secrets)."""
        with self._lock:
            document = {"subscriptions": self.rows_locked(), STATE_OFFSET_FIELD: self.covered}
            self.dirty = False
        try:
            write_bytes_atomically(self.path, orjson.dumps(document), mode=0o600)
        except OSError:
            self.dirty = True
            raise
