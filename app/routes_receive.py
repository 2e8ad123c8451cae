"""Group consumption's routes: receive, ack, invisible time, and the event stream (app/receiver.py,
app/receive_stream.py serve them)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from starlette.responses import Response, StreamingResponse

from app.broker import Broker
from app.hot_routes import Handler
from app.models import example_of
from app.params import GroupPath, TopicPath
from app.receive_models import AckRequest, AckResult, InvisibleRequest, InvisibleResult, ReceiveResult
from app.receive_stream import STREAM_OPENAPI, ReceiveStream, parse_max_in_flight
from app.receiver import RECEIVE_OPENAPI, Receiver
from app.responses import docs
from app.strict_route import StrictRoute

# The ack body is parsed by the handler (the hot path serves it too); the spec still declares its model.
ACK_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AckRequest"},
                                         "example": example_of(AckRequest)}},
    }
}  # fmt: skip


TOPIC_PROBLEMS = ("GROUP_INVALID", "TOPIC_INVALID", "TOPIC_NOT_FOUND", "NOT_MASTER")
# receiveStream's replies: an event stream, or the problems of a receive that cannot start.
STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "An event stream",
        "content": {"text/event-stream": {"schema": {"type": "string"}, "example": ": stream open\n\nevent: message\ndata: {...}\n\n"}},
    },
    **{
        k: v
        for k, v in docs(
            None,
            200,
            *TOPIC_PROBLEMS,
            "TOPIC_NOT_READABLE",
            "MAX_INVALID",
            "INVISIBLE_TIME_INVALID",
            "TAG_INVALID",
            "TOO_MANY_STREAMS",
            "FILTER_INVALID",
        ).items()
        if k != 200
    },
}


def router(broker: Broker) -> tuple[APIRouter, Handler, Handler]:
    api = APIRouter(tags=["group consumption"], route_class=StrictRoute)
    receiver = Receiver(broker)
    stream = ReceiveStream(receiver)

    @api.post(
        "/v1/groups/{group}/topics/{topic}/receive",
        operation_id="receive",
        summary="Receive up to max visible messages of a topic for a group, each invisible to the group for invisible_ms",
        responses=docs(
            ReceiveResult,
            200,
            *TOPIC_PROBLEMS,
            "TOPIC_NOT_READABLE",
            "MAX_INVALID",
            "INVISIBLE_TIME_INVALID",
            "WAIT_TOO_LONG",
            "TAG_INVALID",
            "FILTER_INVALID",
            "TOO_MANY_WAITERS",
        ),  # fmt: skip
        openapi_extra=RECEIVE_OPENAPI,
    )
    async def receive(group: GroupPath, topic: TopicPath, request: Request) -> Response:
        return await receiver.receive(request)

    @api.post(
        "/v1/groups/{group}/topics/{topic}/ack",
        operation_id="ack",
        summary="Ack received messages by their receipt handles: an acked message is never delivered to the group again",
        responses=docs(AckResult, 200, *TOPIC_PROBLEMS, "BODY_INVALID"),
        openapi_extra=ACK_OPENAPI,
    )
    async def ack(group: GroupPath, topic: TopicPath, request: Request) -> Response:
        return await receiver.ack(request)

    @api.post(
        "/v1/groups/{group}/topics/{topic}/invisible",
        operation_id="changeInvisibleTime",
        summary="Make a received message invisible for invisible_ms from now; answers its new receipt handle",
        responses=docs(
            InvisibleResult,
            200,
            *TOPIC_PROBLEMS,
            "HANDLE_INVALID",
            "HANDLE_EXPIRED",
            "ALREADY_ACKED",
            "HANDLE_SUPERSEDED",
            "STORE_WRITE_FAILED",
        ),  # fmt: skip
    )
    async def invisible(group: GroupPath, topic: TopicPath, body: Annotated[InvisibleRequest, Body()]) -> Response:
        return await receiver.change_invisible(group, topic, body)

    @api.get(
        "/v1/groups/{group}/topics/{topic}/stream",
        operation_id="receiveStream",
        summary="Receive as Server-Sent Events: one message event per message, at most max_in_flight unacked",
        response_class=StreamingResponse,
        responses=STREAM_RESPONSES,
        openapi_extra=STREAM_OPENAPI,
    )
    async def receive_stream(group: GroupPath, topic: TopicPath, request: Request) -> Response:
        max_in_flight = parse_max_in_flight(request)
        spec = receiver.parse(request, extra=("max_in_flight",))
        return stream.response(request, spec, max_in_flight)

    return api, receiver.receive, receiver.ack
