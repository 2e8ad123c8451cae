"""Pydantic models of group consumption's bodies (receive, ack, invisible time, group settings).

Requests are validated by FastAPI (strict: no coercion, no extra fields); replies are written
with orjson by the handlers and documented here for the OpenAPI spec.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.models import MESSAGE_EXAMPLE, JsonInt, Message, example_of
from store import MAX_SQL_CHARS

# Bounds of a group's max_reconsume_times (RocketMQ's default is 16).
MAX_RECONSUME_TIMES_LIMIT = 1_000
# Most receipt handles one ack request may carry.
MAX_ACK_HANDLES = 1_000
# A receipt handle is at most this long (store.pop.receipt_handle refuses longer ones as invalid).
HANDLE_MAX_CHARS = 256
# Invisible time bounds: 1 s to 12 h.
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000

HANDLE_EXAMPLE = "MTAwIDE3Njc...IDAgMA.q2b1cT9XzF8m3uVv0H9KxA"


class GroupFilter(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": {"sql": "region = 'eu' AND amount > 100"}})
    sql: str = Field(
        max_length=MAX_SQL_CHARS,
        description="An SQL92 expression over the message's properties and TAGS, as RocketMQ's (docs/http-api.md, SQL92 filters)",
    )


class GroupSettings(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"example": {"max_reconsume_times": 16, "fifo": False, "filter": {"sql": "region = 'eu'"}}},
    )
    max_reconsume_times: JsonInt = Field(
        16, ge=0, le=MAX_RECONSUME_TIMES_LIMIT, description="Redeliveries before a message goes to %DLQ%{group}"
    )
    fifo: bool = Field(False, description="Deliver a queue's next message only after the previous one is acked or dead-lettered")
    filter: GroupFilter | None = Field(
        None, description="Every receive and stream of the group passes only messages this filter passes too (none: no filter)"
    )


class GroupTopic(BaseModel):
    topic: str
    lag: int = Field(description="Messages of the topic (and of the group's retry topic) past the group's offsets")
    received: int
    acked: int
    redelivered: int
    dead_lettered: int
    in_flight: int = Field(description="Received and not yet acked, redelivered or dead-lettered")


class GroupConsumer(BaseModel):
    address: str = Field(description="The client's IP address")
    user_agent: str
    first_seen_ms: int
    last_seen_ms: int = Field(description="When its last request ended")
    requests: int = Field(description="Receives, acks and pulls it made for the group since it was first seen")
    waiting: bool = Field(description="A held receive or pull of it is waiting now")
    topics: list[str]


class GroupInfo(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "group": "billing",
                "max_reconsume_times": 16,
                "fifo": False,
                "filter": None,
                "configured": True,
                "dead_letter_topic": "%DLQ%billing",
                "dead_letters": 0,
                "topics": [{"topic": "orders", "lag": 3, "received": 10, "acked": 7, "redelivered": 0, "dead_lettered": 0, "in_flight": 3}],
                "consumers": [
                    {"address": "10.0.0.7", "user_agent": "tidemq-client/0.1.0", "first_seen_ms": 1767225600000,
                     "last_seen_ms": 1767225630000, "requests": 42, "waiting": True, "topics": ["orders"]}
                ],
            }
        }
    )  # fmt: skip
    group: str
    max_reconsume_times: int
    fifo: bool
    filter: GroupFilter | None = Field(description="The group's own filter, if it has one")
    configured: bool = Field(description="False for a group that only committed offsets or received with the defaults")
    dead_letter_topic: str
    dead_letters: int = Field(description="Messages in the dead-letter topic (read it by pull; resend with .../dead-letters/resend)")
    topics: list[GroupTopic]
    consumers: list[GroupConsumer] = Field(
        description="Clients that received, acked or pulled with ?group= for the group within the last 60 s, or are waiting in a held "
        "request now (an event stream is not counted)"
    )


class GroupList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"example": {"groups": [example_of(GroupInfo)]}})
    groups: list[GroupInfo]


class ReceivedMessage(Message):
    receipt_handle: str
    invisible_until_ms: int


class ReceiveResult(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {"messages": [{**MESSAGE_EXAMPLE, "receipt_handle": HANDLE_EXAMPLE, "invisible_until_ms": 1767225630000}]}
        }
    )
    messages: list[ReceivedMessage]


class AckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": {"receipt_handles": [HANDLE_EXAMPLE]}})
    receipt_handles: list[str] = Field(min_length=1, max_length=MAX_ACK_HANDLES)


class AckItem(BaseModel):
    receipt_handle: str
    status: Literal["OK", "HANDLE_EXPIRED", "HANDLE_INVALID", "NOT_STORED", "ALREADY_ACKED", "HANDLE_SUPERSEDED"] = Field(
        description="OK (acked now), HANDLE_EXPIRED (its invisible time passed: it may be delivered again), HANDLE_INVALID, "
        "NOT_STORED (the ack could not be stored: ack again), ALREADY_ACKED (acked before with this handle: nothing done "
        "or counted), HANDLE_SUPERSEDED (a change of the invisible time replaced it: ack with the handle that change "
        "answered, or the message is delivered again)")  # fmt: skip


class AckResult(BaseModel):
    model_config = ConfigDict(json_schema_extra={"example": {"results": [{"receipt_handle": HANDLE_EXAMPLE, "status": "OK"}]}})
    results: list[AckItem]


class InvisibleRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"example": {"receipt_handle": HANDLE_EXAMPLE, "invisible_ms": 60000}}
    )
    receipt_handle: str = Field(min_length=1, max_length=HANDLE_MAX_CHARS)
    invisible_ms: JsonInt = Field(ge=MIN_INVISIBLE_MS, le=MAX_INVISIBLE_MS)


class InvisibleResult(BaseModel):
    model_config = ConfigDict(json_schema_extra={"example": {"receipt_handle": HANDLE_EXAMPLE, "invisible_until_ms": 1767225660000}})
    receipt_handle: str
    invisible_until_ms: int


def received_json(view: dict[str, Any], handle: str, until: int, reconsume_times: int, topic: str) -> dict[str, Any]:
    """A received message: the pull view of it, named by the topic asked for, with its handle."""
    view["topic"] = topic
    view["reconsume_times"] = reconsume_times
    view["receipt_handle"] = handle
    view["invisible_until_ms"] = until
    return view
