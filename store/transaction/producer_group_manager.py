"""Producer groups' transaction settings (their check-back URL), kept in `config/producerGroup.json`.

RocketMQ keeps no producer group on disk (it checks back over the producer's own connection);
tidemq's producers are HTTP clients, so a group may name a URL the broker POSTs a check to.
Each change is a state record (store/state/state_log.py); the file is the local snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from core.errors import ConfigInvalid
from store.disk.json_file import read_json, write_json_atomically
from store.state.state_table import STATE_OFFSET_FIELD, StateKind, StateTable

FILE_NAME = "producerGroup.json"
MAX_CHECK_URL_CHARS = 2_048  # longest check URL a group may name


@dataclass(slots=True, frozen=True)
class ProducerGroup:
    name: str
    check_url: str | None = None


def check_url_problem(url: str) -> str | None:
    """Why `url` cannot be a check URL (absolute http or https, with a host, bounded); None when it can."""
    if len(url) > MAX_CHECK_URL_CHARS:
        return f"is longer than {MAX_CHECK_URL_CHARS} characters"
    if not url.isascii() or any(c.isspace() or ord(c) < 0x20 for c in url):
        return "must be ASCII without spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError as exc:
        return f"is malformed: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an absolute http:// or https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials"
    return None


class ProducerGroupManager(StateTable):
    """The groups; each change is a state record (store/state/state_log.py), so a new master checks back the
    transactions its old master would have; producerGroup.json is the local snapshot."""

    kind = StateKind.PRODUCER_GROUPS

    def __init__(self, config_dir: str) -> None:
        super().__init__()
        self.path = f"{config_dir}/{FILE_NAME}"
        self._groups: dict[str, ProducerGroup] = {}

    def load(self) -> None:
        data = read_json(self.path)
        table = data.get("producerGroupTable") if isinstance(data, dict) else None
        if data is not None and not isinstance(table, dict):
            raise ConfigInvalid(f"{self.path}: producerGroupTable must be an object")
        groups: dict[str, ProducerGroup] = {}
        for name, doc in (table or {}).items():
            groups[name] = _group_of(name, doc, self.path)
        self._groups = groups
        if data is not None:
            covered = data.get(STATE_OFFSET_FIELD, 0)
            self.loaded(covered if type(covered) is int else 0)

    def get(self, name: str) -> ProducerGroup | None:
        return self._groups.get(name)

    def all(self) -> list[ProducerGroup]:
        with self._lock:  # changed in place under it
            groups = list(self._groups.values())
        return sorted(groups, key=lambda g: g.name)

    def put(self, group: ProducerGroup) -> bool:
        """Create or replace a group (blocking: recorded durably before it returns); True when created."""
        created = group.name not in self._groups
        self.record({"put": _doc_of(group)})
        return created

    # StateTable --------------------------------------------------------------------------------

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        doc = payload.get("put")
        if isinstance(doc, dict):
            group = _group_of(str(doc.get("groupName")), doc, "a state record")
            self._groups[group.name] = group

    def rows_locked(self) -> list[Any]:
        return [_doc_of(g) for g in self._groups.values()]

    def row_count_locked(self) -> int:
        return len(self._groups)

    def restore_locked(self, rows: list[Any]) -> None:
        self._groups = {}
        for doc in rows:
            self.apply_locked({"put": doc})

    def persist(self) -> None:
        with self._lock:
            doc: dict[str, Any] = {
                "producerGroupTable": {g.name: _doc_of(g) for g in self._groups.values()},
                STATE_OFFSET_FIELD: self.covered,
            }
            self.dirty = False
        try:
            write_json_atomically(self.path, doc)
        except OSError:
            self.dirty = True
            raise


def _doc_of(group: ProducerGroup) -> dict[str, Any]:
    return {"groupName": group.name, "checkUrl": group.check_url}


def _group_of(name: str, doc: Any, where: str) -> ProducerGroup:
    url = doc.get("checkUrl") if isinstance(doc, dict) else None
    if url is not None and (not isinstance(url, str) or check_url_problem(url)):
        raise ConfigInvalid(f"{where}: the check URL of producer group {name!r} is invalid")
    return ProducerGroup(name, url)
