"""Pydantic models of the transaction routes' bodies (resolution, producer group settings, listings).

Requests are validated by FastAPI (strict: no coercion, no extra fields); replies are written
with orjson by the handlers and documented here for the OpenAPI spec.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from store import PRODUCER_GROUP_MAX_BYTES, TOPIC_NAME_PATTERN

TRANSACTION_ID_EXAMPLE = "7F00000100002A9F0000000000001F40"


class TransactionRef(BaseModel):
    """The JSON produce's `transaction` field: store the message as a half message of this producer group."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": {"producer_group": "pg-orders"}})
    producer_group: str = Field(
        min_length=1, max_length=PRODUCER_GROUP_MAX_BYTES, pattern=TOPIC_NAME_PATTERN, description="The producer group"
    )


class TransactionResolve(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": {"action": "commit"}})
    action: Literal["commit", "rollback"] = Field(description="commit: deliver the message (once); rollback: discard it")


class TransactionResolved(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"example": {"transaction_id": TRANSACTION_ID_EXAMPLE, "state": "committed", "changed": True}}
    )
    transaction_id: str
    state: Literal["committed", "rolled_back"]
    changed: bool = Field(description="False when the transaction was already resolved this way (the request changed nothing)")


# What store.check_url_problem takes: http or https, a host (a bracketed IPv6 address or a name without "@": no
# credentials), an optional port of 0..65535, then printable ASCII without spaces.
CHECK_URL_PATTERN = (
    "^[Hh][Tt][Tt][Pp][Ss]?://(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9._~%!$&'()*+,;=-]+)"
    "(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?([/?#][!-~]*)?$"
)


class ProducerGroupSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": {"check_url": "http://127.0.0.1:9000/check"}})
    check_url: str | None = Field(
        None,
        description="Absolute http:// or https:// URL of at most 2,048 characters the broker POSTs check-backs to; "
        "null: none (the producer lists its unresolved transactions instead). Anything else is CHECK_URL_INVALID",
        json_schema_extra={"maxLength": 2048, "pattern": CHECK_URL_PATTERN},
    )


class ProducerGroupInfo(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"example": {"producer_group": "pg-orders", "check_url": "http://127.0.0.1:9000/check", "pending": 0}}
    )
    producer_group: str
    check_url: str | None
    pending: int = Field(description="Transactions of the group not resolved yet")


class PendingTransaction(BaseModel):
    transaction_id: str
    producer_group: str
    msg_id: str = Field(description="The message's UNIQ_KEY")
    topic: str
    queue_id: int
    tags: str | None
    keys: list[str]
    store_timestamp: int
    age_ms: int
    checks: int = Field(description="Checks so far; at transaction_check_max the broker rolls it back")


class PendingTransactions(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "producer_group": "pg-orders", "state": "unknown",
                "transactions": [{"transaction_id": TRANSACTION_ID_EXAMPLE, "producer_group": "pg-orders",
                                  "msg_id": "7F000001A1B2C3D4E5F60000000A0001", "topic": "orders", "queue_id": 0, "tags": None,
                                  "keys": ["order-1"], "store_timestamp": 1767225600000, "age_ms": 6500, "checks": 1}],
            }
        }
    )  # fmt: skip
    producer_group: str
    state: Literal["unknown", "pending"]
    transactions: list[PendingTransaction]
