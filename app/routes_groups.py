"""Consumer groups: /v1/groups, /v1/groups/{group} (settings, deletion) and /v1/groups/{group}/offsets.

Invariants: a commit names an existing topic and queue and an offset in 0..max offset of that
queue; a request with several commits checks all of them before committing any. A 200 means
the commits are in the offset log (store/metadata/consumer_offset_manager.py): they survive a kill of the
process, and a machine crash when the store is SYNC_FLUSH.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from starlette.responses import Response

from app.access_check import require
from app.acl import SUB
from app.broker import Broker, BrokerDep
from app.filter_params import parse_sql_filter
from app.models import GroupOffsets, OffsetCommit, OffsetsCommitted
from app.params import GroupPath, TopicQuery
from app.problems import ProblemError
from app.receive_models import GroupInfo, GroupList, GroupSettings
from app.responses import JsonResponse, docs, docs_create_or_update
from app.strict_route import StrictRoute
from store import MessageStore, PopCounts, StoreNotRunning, consumption_problem, dlq_topic, group_problem, retry_topic

# Most commits one request may carry.
MAX_COMMITS_PER_REQUEST = 10_000


def check_group(group: str) -> None:
    problem = group_problem(group)
    if problem is not None:
        raise ProblemError("GROUP_INVALID", f"{problem}: {group[:200]!r}")


def check_consumption(group: str, topic: str) -> None:
    """400 GROUP_INVALID when `group` cannot receive from `topic` (its retry or dead-letter topic's name would be too long)."""
    problem = consumption_problem(group, topic)
    if problem is not None:
        raise ProblemError("GROUP_INVALID", problem)


def group_lag(store: MessageStore, group: str, topic: str) -> int:
    """Messages of the topic and of the group's retry topic past the group's offsets."""
    lag = 0
    for name in (topic, retry_topic(group, topic)):
        config = store.topic_config(name)
        for q in range(config.read_queue_nums if config is not None else 0):
            committed = store.query_offset(group, name, q)
            lag += max(0, store.get_max_offset_in_queue(name, q) - max(committed, store.get_min_offset_in_queue(name, q)))
    return lag


api = APIRouter(tags=["groups"], route_class=StrictRoute)


@api.put(
    "/v1/groups/{group}/offsets",
    operation_id="commitOffsets",
    summary="Commit a consumer group's offset for one queue (an object) or several (an array)",
    responses=docs(
        OffsetsCommitted,
        200,
        "GROUP_INVALID",
        "TOPIC_INVALID",
        "TOPIC_NOT_FOUND",
        "QUEUE_NOT_FOUND",
        "OFFSET_INVALID",
        "OFFSET_OUT_OF_RANGE",
        "BODY_TOO_LARGE",
        "STORE_WRITE_FAILED",
        "SHUTTING_DOWN",
        "NOT_MASTER",
        "NO_MASTER",
        "NOT_ENOUGH_REPLICAS",
    ),
)
async def commit(
    broker: BrokerDep, request: Request, group: GroupPath, body: Annotated[OffsetCommit | list[OffsetCommit], Body()]
) -> Response:
    store = broker.store
    check_group(group)
    broker.check_master()  # a slave or a fenced master refuses before anything is stored, as a produce does
    commits = body if isinstance(body, list) else [body]
    if len(commits) > MAX_COMMITS_PER_REQUEST:
        raise ProblemError("REQUEST_INVALID", f"at most {MAX_COMMITS_PER_REQUEST} commits per request")
    for topic in {c.topic for c in commits}:
        require(request, SUB, topic, "commit offsets of")  # the gate checked the group; the body names the topics
    for c in commits:
        broker.readable_queue(c.topic, c.queue_id)
        max_offset = store.get_max_offset_in_queue(c.topic, c.queue_id)
        if c.offset < 0:
            raise ProblemError("OFFSET_INVALID", f"offset of {c.topic}/{c.queue_id} must be >= 0, not {c.offset}")
        if c.offset > max_offset:
            raise ProblemError(
                "OFFSET_OUT_OF_RANGE", f"offset of {c.topic}/{c.queue_id} must be at most its max offset {max_offset}, not {c.offset}"
            )
    # One durable log record for the whole request, written in the pool (blocking file I/O).
    try:
        await broker.run(store.commit_offsets, group, [(c.topic, c.queue_id, c.offset) for c in commits])
    except OSError as exc:
        raise ProblemError("STORE_WRITE_FAILED", f"the offsets could not be recorded durably: {exc}") from exc
    except StoreNotRunning as exc:
        raise ProblemError("SHUTTING_DOWN", str(exc)) from exc
    return JsonResponse({"group": group, "committed": [c.model_dump() for c in commits]})


@api.get(
    "/v1/groups/{group}/offsets",
    operation_id="getOffsets",
    summary="A group's committed offset, the max offset and the lag of each queue of a topic",
    responses=docs(GroupOffsets, 200, "GROUP_INVALID", "TOPIC_INVALID", "TOPIC_NOT_FOUND"),
)
async def get_offsets(broker: BrokerDep, group: GroupPath, topic: TopicQuery) -> Response:
    store = broker.store
    check_group(group)
    topic_config = broker.topic_config(topic)
    queues = []
    for q in range(topic_config.read_queue_nums):
        committed = store.query_offset(group, topic, q)
        min_offset = store.get_min_offset_in_queue(topic, q)
        max_offset = store.get_max_offset_in_queue(topic, q)
        lag = max_offset - max(committed, min_offset)
        queues.append(
            {"queue_id": q, "committed_offset": committed, "min_offset": min_offset, "max_offset": max_offset, "lag": max(lag, 0)}
        )
    return JsonResponse({"group": group, "topic": topic, "queues": queues})


def group_info(broker: Broker, name: str, topics: list[str]) -> dict[str, Any]:
    store = broker.store
    gc = store.group_consumption
    settings = gc.group(name)
    counts = gc.counts()
    rows = []
    for topic in sorted(set(topics) | {t for g, t in counts if g == name}):
        c = counts.get((name, topic)) or PopCounts()
        rows.append({"topic": topic, "lag": group_lag(store, name, topic), "received": c.received, "acked": c.acked,
                     "redelivered": c.redelivered, "dead_lettered": c.dead_lettered, "in_flight": c.in_flight})  # fmt: skip
    configured = gc.is_configured(name)
    group_filter = {"sql": settings.filter_sql} if settings.filter_sql is not None else None
    dlq = dlq_topic(name)
    dead_letters = max(0, store.get_max_offset_in_queue(dlq, 0) - store.get_min_offset_in_queue(dlq, 0))
    return {"group": name, "max_reconsume_times": settings.max_reconsume_times, "fifo": settings.fifo, "filter": group_filter,
            "configured": configured, "dead_letter_topic": dlq, "dead_letters": dead_letters, "topics": rows,
            "consumers": broker.consumers.connected(name)}  # fmt: skip


@api.put(
    "/v1/groups/{group}",
    operation_id="putGroup",
    summary="Create or update a consumer group's settings for group consumption",
    responses=docs_create_or_update(GroupInfo, "GROUP_INVALID", "BODY_INVALID", "FILTER_INVALID", "NOT_MASTER"),
)
async def put_group(broker: BrokerDep, group: GroupPath, body: Annotated[GroupSettings, Body()]) -> Response:
    store = broker.store
    check_group(group)
    broker.check_master()
    filter_sql = body.filter.sql if body.filter is not None else None
    parse_sql_filter(filter_sql)  # 400 FILTER_INVALID before anything changes
    gc = store.group_consumption
    created = await broker.run(gc.put_group, group, body.max_reconsume_times, body.fifo, filter_sql)
    info = group_info(broker, group, gc.topics_by_group().get(group, []))
    return JsonResponse(info, 201 if created else 200)


@api.get("/v1/groups", operation_id="listGroups", summary="The consumer groups with their topics and lag", responses=docs(GroupList))
async def list_groups(broker: BrokerDep) -> Response:
    store = broker.store
    gc = store.group_consumption
    topics = gc.topics_by_group()
    names = sorted(set(topics) | {g.name for g in gc.configured_groups()} | {g for g, _ in gc.counts()})
    return JsonResponse({"groups": [group_info(broker, n, topics.get(n, [])) for n in names]})


@api.get(
    "/v1/groups/{group}",
    operation_id="getGroup",
    summary="One consumer group: its settings, topics, lag and consumption counts",
    responses=docs(GroupInfo, 200, "GROUP_INVALID", "NOT_FOUND"),
)
async def get_group(broker: BrokerDep, group: GroupPath) -> Response:
    store = broker.store
    check_group(group)
    gc = store.group_consumption
    topics = gc.topics_by_group().get(group)
    if topics is None and not gc.is_configured(group) and not any(g == group for g, _ in gc.counts()):
        raise ProblemError("NOT_FOUND", f"no group {group}: it was never configured and never consumed")
    return JsonResponse(group_info(broker, group, topics or []))


@api.delete(
    "/v1/groups/{group}",
    operation_id="deleteGroup",
    summary="Delete a consumer group: its settings and every offset it committed (its retry and dead-letter topics stay)",
    status_code=204,
    responses={**docs(None, 204, "GROUP_INVALID", "NOT_FOUND", "NOT_MASTER", "STORE_WRITE_FAILED"), 204: {"description": "Deleted"}},
)
async def delete_group(broker: BrokerDep, group: GroupPath) -> Response:
    check_group(group)
    broker.check_master()
    if not await broker.run(broker.store.group_consumption.delete_group, group):
        raise ProblemError("NOT_FOUND", f"no group {group}: it has no settings and no committed offsets")
    return Response(status_code=204)
