"""The `dataVersion` of RocketMQ's metadata files (DataVersion: a write timestamp, a counter that
grows with every write, ConfigManager's persist, and from RocketMQ 5 a `stateVersion`, the store's
state machine version, 0 outside controller mode), read and written the same way by the topic and
subscription group managers and the delay offset table."""

from __future__ import annotations

import time
from typing import Any


def data_version_counter(doc: dict[str, Any]) -> int:
    """The counter of a loaded file's dataVersion; 0 when the file has none or it is malformed."""
    version = doc.get("dataVersion")
    counter = version.get("counter") if type(version) is dict else None
    return counter if type(counter) is int else 0


def versioned_document(table_name: str, table: dict[str, Any], counter: int) -> dict[str, Any]:
    """A metadata file's content: its table, and the dataVersion of this write (`counter`, now)."""
    return {table_name: table, "dataVersion": {"stateVersion": 0, "timestamp": int(time.time() * 1000), "counter": counter}}
