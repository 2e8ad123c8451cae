"""Producer groups' transaction settings (their check-back URL), kept in `config/producerGroup.json`.

RocketMQ keeps no producer group on disk (it checks back over the producer's own connection);
tidemq's producers are HTTP clients, so a group may name a URL the broker POSTs a check to.
The file is written atomically (store.json_file) on every change; changes are rare.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from store.errors import ConfigInvalid
from store.json_file import read_json, write_json_atomically

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


class ProducerGroupManager:
    def __init__(self, config_dir: str) -> None:
        self.path = f"{config_dir}/{FILE_NAME}"
        self._groups: dict[str, ProducerGroup] = {}
        self._lock = threading.Lock()  # serializes changes and their persistence; a leaf lock

    def load(self) -> None:
        data = read_json(self.path)
        groups: dict[str, ProducerGroup] = {}
        table = data.get("producerGroupTable") if isinstance(data, dict) else None
        if data is not None and not isinstance(table, dict):
            raise ConfigInvalid(f"{self.path}: producerGroupTable must be an object")
        for name, doc in (table or {}).items():
            url = doc.get("checkUrl") if isinstance(doc, dict) else None
            if url is not None and (not isinstance(url, str) or check_url_problem(url)):
                raise ConfigInvalid(f"{self.path}: the check URL of producer group {name!r} is invalid")
            groups[name] = ProducerGroup(name, url)
        self._groups = groups

    def get(self, name: str) -> ProducerGroup | None:
        return self._groups.get(name)

    def all(self) -> list[ProducerGroup]:
        return sorted(self._groups.values(), key=lambda g: g.name)

    def put(self, group: ProducerGroup) -> bool:
        """Create or replace a group (blocking: persisted before it returns); True when created."""
        with self._lock:
            created = group.name not in self._groups
            groups = {**self._groups, group.name: group}
            doc: dict[str, Any] = {"producerGroupTable": {g.name: {"groupName": g.name, "checkUrl": g.check_url} for g in groups.values()}}
            write_json_atomically(self.path, doc)
            self._groups = groups  # copy-on-write: readers never take the lock
            return created
