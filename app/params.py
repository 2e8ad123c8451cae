"""Annotated path and query parameter types shared by the routes.

The constraints here are documented in the spec only (json_schema_extra); the handlers check
them themselves so that each bad form gets its own problem code (TOPIC_INVALID, GROUP_INVALID,
MESSAGE_ID_INVALID) rather than a generic validation error, and without a second regex pass.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import JsonValue

from store import GROUP_MAX_BYTES, PRODUCER_GROUP_MAX_BYTES, TOPIC_MAX_BYTES, TOPIC_NAME_PATTERN

# The store's naming rule for topics, also used for group names, with each kind's length (the names are ASCII).
NAME_SCHEMA: dict[str, JsonValue] = {"pattern": TOPIC_NAME_PATTERN, "maxLength": TOPIC_MAX_BYTES, "minLength": 1}
GROUP_SCHEMA: dict[str, JsonValue] = {"pattern": TOPIC_NAME_PATTERN, "maxLength": GROUP_MAX_BYTES, "minLength": 1}
PRODUCER_GROUP_SCHEMA: dict[str, JsonValue] = {"pattern": TOPIC_NAME_PATTERN, "maxLength": PRODUCER_GROUP_MAX_BYTES, "minLength": 1}

TopicPath = Annotated[str, Path(description="Topic name", json_schema_extra=NAME_SCHEMA)]
GroupPath = Annotated[str, Path(description="Consumer group name", json_schema_extra=GROUP_SCHEMA)]
QueuePath = Annotated[
    int, Path(description="Queue id (0 .. the topic's queue count - 1)", json_schema_extra={"minimum": 0, "maximum": 65535})
]
TopicQuery = Annotated[str, Query(description="Topic name", json_schema_extra=NAME_SCHEMA)]
GroupQuery = Annotated[
    str | None,
    Query(description="Consumer group whose committed offset to start from when offset is omitted", json_schema_extra=GROUP_SCHEMA),
]
OffsetMsgIdPath = Annotated[
    str,
    Path(
        description="Offset message id: 32 hex characters, 56 for a message whose store host is IPv6",
        json_schema_extra={"pattern": "^[0-9A-Fa-f]{32}([0-9A-Fa-f]{24})?$"},
    ),
]
