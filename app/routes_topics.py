"""Topic administration: /v1/topics and /v1/topics/{topic}.

Invariants: every topic name is checked (`Broker.check_topic_name`) before the store sees it;
topic configuration writes (which persist a file) run in the read pool, not on the loop.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from starlette.responses import Response

from app.access_check import require_admin
from app.broker import Broker, BrokerDep
from app.models import TopicInfo, TopicList, TopicSpec
from app.params import TopicPath
from app.problems import ProblemError
from app.responses import JsonResponse, docs, docs_create_or_update
from app.strict_route import StrictRoute
from store import topic_kind


def topic_json(config: Any, queues: list[dict[str, int]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topic": config.topic_name,
        "read_queues": config.read_queue_nums,
        "write_queues": config.write_queue_nums,
        "perm": config.perm,
    }
    if queues is not None:
        out["queues"] = queues
    return out


api = APIRouter(tags=["topics"], route_class=StrictRoute)


def queue_offsets(broker: Broker, topic: str, queues: int) -> list[dict[str, int]]:
    store = broker.store
    return [
        {"queue_id": q, "min_offset": store.get_min_offset_in_queue(topic, q), "max_offset": store.get_max_offset_in_queue(topic, q)}
        for q in range(queues)
    ]


@api.put(
    "/v1/topics/{topic}",
    operation_id="putTopic",
    summary="Create a topic or update its queue count and permissions",
    status_code=200,
    responses=docs_create_or_update(
        TopicInfo, "TOPIC_INVALID", "TOPIC_RESERVED", "NOT_MASTER", "QUEUE_COUNT_INVALID", "BODY_INVALID", "BODY_TOO_LARGE"
    ),
)
async def put_topic(broker: BrokerDep, topic: TopicPath, request: Request, spec: Annotated[TopicSpec | None, Body()] = None) -> Response:
    broker.check_topic_name(topic, for_write=True)
    broker.check_master()  # a slave mirrors its master's topic table
    spec = spec or TopicSpec(queues=None, perm=None)
    config = broker.config
    before = broker.store.topic_config(topic)
    perm = spec.perm if spec.perm is not None else before.perm if before is not None else "rw"
    # Without queues, an existing topic keeps its count (a PUT that only changes perm does not resize it).
    default_queues = before.read_queue_nums if before is not None else config.default_topic_queue_nums
    queues = spec.queues if spec.queues is not None else default_queues
    if not 1 <= queues <= config.max_topic_queue_nums:
        raise ProblemError("QUEUE_COUNT_INVALID", f"queues must be in 1..{config.max_topic_queue_nums}")
    changed = topic_changes(before, queues, perm)
    if before is not None and changed:
        require_admin(request, f"changing topic {topic}'s {' and '.join(changed)}")  # CREATE creates; it changes nothing
    if before is not None and not changed:
        return JsonResponse({**topic_json(before, queue_offsets(broker, topic, before.read_queue_nums)), "changed": {}})
    config_now = await broker.run(broker.store.create_or_update_topic, topic, queues, perm)
    out = topic_json(config_now, queue_offsets(broker, topic, config_now.read_queue_nums))
    if before is None:
        return JsonResponse(out, 201)
    out["changed"] = changed
    hidden = out_of_reach(broker, topic, before.read_queue_nums, config_now.read_queue_nums)
    if hidden:
        ids = ", ".join(str(q["queue_id"]) for q in hidden)
        count = sum(q["max_offset"] - q["min_offset"] for q in hidden)
        out["warning"] = (
            f"{count} stored message{'s' if count != 1 else ''} in queue{'s' if len(hidden) != 1 else ''} {ids} "
            f"{'are' if count != 1 else 'is'} no longer served (the topic now has queues 0..{config_now.read_queue_nums - 1}); "
            "they are served again if the queue count grows back"
        )
    return JsonResponse(out, 200)


def topic_changes(before: Any, queues: int, perm: str) -> dict[str, dict[str, Any]]:
    """What a PUT changes in an existing topic: {field: {"old": old, "new": new}}; empty for a new topic or no change."""
    if before is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for name, old, new in (("read_queues", before.read_queue_nums, queues), ("write_queues", before.write_queue_nums, queues),
                           ("perm", before.perm, perm)):  # fmt: skip
        if old != new:
            out[name] = {"old": old, "new": new}
    return out


def out_of_reach(broker: Broker, topic: str, old_queues: int, new_queues: int) -> list[dict[str, int]]:
    """The queues a smaller count leaves unread that still hold messages."""
    store = broker.store
    gone = [
        {"queue_id": q, "min_offset": store.get_min_offset_in_queue(topic, q), "max_offset": store.get_max_offset_in_queue(topic, q)}
        for q in range(new_queues, old_queues)
    ]
    return [q for q in gone if q["max_offset"] > q["min_offset"]]


@api.get("/v1/topics", operation_id="listTopics", summary="List the topics", responses=docs(TopicList, 200))
async def list_topics(broker: BrokerDep) -> Response:
    topics = sorted(broker.store.topic_configs(), key=lambda c: c.topic_name)
    return JsonResponse({"topics": [{**topic_json(c), "kind": topic_kind(c.topic_name)} for c in topics]})


@api.get(
    "/v1/topics/{topic}",
    operation_id="getTopic",
    summary="A topic's configuration and each queue's min and max offset",
    responses=docs(TopicInfo, 200, "TOPIC_INVALID", "TOPIC_NOT_FOUND"),
)
async def get_topic(broker: BrokerDep, topic: TopicPath) -> Response:
    topic_config = broker.topic_config(topic)
    return JsonResponse(topic_json(topic_config, queue_offsets(broker, topic, topic_config.read_queue_nums)))


@api.delete(
    "/v1/topics/{topic}",
    operation_id="deleteTopic",
    summary="Delete a topic: its configuration and its consume queues",
    status_code=204,
    responses={**docs(None, 204, "TOPIC_INVALID", "TOPIC_RESERVED", "NOT_MASTER", "TOPIC_NOT_FOUND"), 204: {"description": "Deleted"}},
)
async def delete_topic(broker: BrokerDep, topic: TopicPath) -> Response:
    broker.check_topic_name(topic, for_write=True)
    broker.check_master()
    broker.topic_config(topic)
    await broker.run(broker.store.delete_topic, topic)
    broker.forget_topic(topic)
    broker.streams.end_topic(topic, "TOPIC_NOT_FOUND", f"topic {topic} was deleted")
    return Response(status_code=204)
