"""The request and reply of `POST /v1/groups/{group}/dead-letters/resend`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.models import integral
from store import MAX_RESEND


class ResendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": {"offsets": [0, 1]}})
    offsets: list[Annotated[int, Field(ge=0), BeforeValidator(integral)]] = Field(
        min_length=1,
        max_length=MAX_RESEND,
        description="Offsets in the dead-letter topic's queue 0 (`%DLQ%{group}`, read it by pull); each at most once",
        json_schema_extra={"uniqueItems": True},
    )


class ResendItem(BaseModel):
    offset: int
    status: Literal["RESENT", "NOT_FOUND", "NO_ORIGIN"] = Field(
        description="RESENT: a copy is in the group's retry topic; NOT_FOUND: no message at that offset (never, or removed by "
        "retention); NO_ORIGIN: the message names no topic it came from (it was produced to the dead-letter topic directly)"
    )
    topic: str | None = Field(None, description="The topic the message was first produced to")
    msg_id: str | None = None


class ResendResult(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {"group": "billing", "results": [{"offset": 0, "status": "RESENT", "topic": "orders", "msg_id": "7F0000010001"}]}
        }
    )
    group: str
    results: list[ResendItem]
