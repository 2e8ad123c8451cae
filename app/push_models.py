"""Pydantic models of push subscriptions' and dead-letter redrives' bodies (requests validated
strictly by FastAPI; replies written by the handlers and documented here for the spec)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.models import example_of, integral
from app.push_targets import MAX_PUSH_URL_BYTES
from store import TOPIC_MAX_BYTES, TOPIC_NAME_PATTERN

# A signing secret's length bounds, in characters (the store holds at most 256 bytes).
MIN_SECRET_CHARS = 16
MAX_SECRET_CHARS = 128
# Defaults of a subscription's optional fields (the broker's push_max_* settings bound them).
DEFAULT_MAX_IN_FLIGHT = 16
DEFAULT_TIMEOUT_MS = 10_000
# The largest max_messages a redrive may ask for.
MAX_REDRIVE_MESSAGES = 1_000_000_000

SUBSCRIPTION_EXAMPLE: dict[str, Any] = {"topic": "orders", "url": "http://127.0.0.1:9000/hook", "max_in_flight": 16, "timeout_ms": 10000,
                        "secret": "change-me-to-a-long-random-secret"}  # fmt: skip
COUNTS_EXAMPLE: dict[str, Any] = {"delivered": 12, "failed": 1, "errors": 0, "too_large": 0, "in_flight": 2, "last_status": 200, "last_error": None,
                  "last_attempt_ms": 1767225600000}  # fmt: skip


class PushSubscriptionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": SUBSCRIPTION_EXAMPLE})
    topic: str = Field(
        min_length=1,
        description="The topic whose messages are pushed (it must exist)",
        json_schema_extra={"pattern": TOPIC_NAME_PATTERN, "maxLength": TOPIC_MAX_BYTES},  # the route checks: TOPIC_INVALID
    )
    url: str = Field(min_length=1, max_length=MAX_PUSH_URL_BYTES,
                     description="Absolute http(s) URL each message is POSTed to; its host must be in the broker's push_allowed_hosts")  # fmt: skip
    max_in_flight: Annotated[int, Field(ge=1), BeforeValidator(integral)] | None = Field(
        None, description=f"Deliveries under way at once, at most push_max_in_flight; none: {DEFAULT_MAX_IN_FLIGHT} (or that limit)"
    )
    timeout_ms: Annotated[int, Field(ge=100), BeforeValidator(integral)] | None = Field(
        None,
        description=f"One delivery's whole time, connect to status line, at most push_max_timeout_ms; none: {DEFAULT_TIMEOUT_MS} (or that limit)",
    )
    secret: str = Field(min_length=MIN_SECRET_CHARS, max_length=MAX_SECRET_CHARS,
                        description="Key of the tidemq-signature HMAC; never shown again")  # fmt: skip


class PushCountsView(BaseModel):
    delivered: int = Field(description="Deliveries answered 2xx (acked), since the broker started")
    failed: int = Field(description="Deliveries answered with another status (retried after RocketMQ's backoff)")
    errors: int = Field(description="Deliveries without a reply: connection failures, the timeout (retried likewise)")
    too_large: int = Field(description="Messages over push_max_body_bytes, moved to %DLQ%{group} unposted")
    in_flight: int
    last_status: int | None = None
    last_error: str | None = None
    last_attempt_ms: int


class PushSubscriptionInfo(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {"group": "billing-hook", **{k: v for k, v in SUBSCRIPTION_EXAMPLE.items() if k != "secret"}, "created_ms": 1767225600000,
                        "state": "delivering", "lag": 0, "dead_letter_topic": "%DLQ%billing-hook", "counts": COUNTS_EXAMPLE}
        }
    )  # fmt: skip
    group: str
    topic: str
    url: str
    max_in_flight: int
    timeout_ms: int
    created_ms: int
    state: str = Field(description="delivering (this broker is a master accepting writes) or standby")
    lag: int = Field(description="Messages of the topic (and the group's retry topic) past the group's offsets")
    dead_letter_topic: str
    counts: PushCountsView


class PushSubscriptionList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"example": {"subscriptions": [example_of(PushSubscriptionInfo)]}})
    subscriptions: list[PushSubscriptionInfo]


class RedriveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": {"max_messages": 1000}})
    max_messages: Annotated[int, Field(ge=1, le=MAX_REDRIVE_MESSAGES), BeforeValidator(integral)] | None = Field(
        None, description="Move at most this many; none: every dead letter"
    )


class RedriveInfo(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {"group": "billing", "state": "running", "dead_letter_topic": "%DLQ%billing", "start_offset": 0, "end_offset": 120,
                        "position": 64, "total": 120, "moved": 64, "skipped": 0, "remaining": 56, "started_ms": 1767225600000,
                        "finished_ms": None, "dead_letters_after": 56}
        }
    )  # fmt: skip
    group: str
    state: str = Field(description="running or done")
    dead_letter_topic: str
    start_offset: int = Field(description="Queue offset of %DLQ%{group} where the redrive began")
    end_offset: int = Field(description="The offset it stops before")
    position: int = Field(description="The first offset not moved yet")
    total: int
    moved: int = Field(description="Dead letters put back into the group's retry topic, reconsume times 0")
    skipped: int = Field(description="Offsets passed without a move: no RETRY_TOPIC property, or removed by retention")
    remaining: int
    started_ms: int
    finished_ms: int | None = None
    dead_letters_after: int = Field(description="Dead letters at or past the position now (later ones included)")
