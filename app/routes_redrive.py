"""Dead-letter redrive: /v1/groups/{group}/dlq/redrive (POST starts one, GET shows the latest).

Invariants: one redrive per group at a time (a second POST while one runs is 409 REDRIVE_RUNNING
with the running one); a 202 means the redrive is recorded in the state log, so a restart or a
failover goes on with it (store/pop/dlq_redrive.py moves the messages, exactly once). FIFO groups are
refused (409 REDRIVE_NOT_SUPPORTED): their receives do not read the retry topic a redrive fills.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from starlette.responses import Response

from app.broker import Broker, BrokerDep
from app.params import GroupPath
from app.problems import ProblemError
from app.push_models import RedriveInfo, RedriveRequest
from app.responses import JsonResponse, docs
from app.routes_groups import check_group
from app.strict_route import StrictRoute
from store import Redrive, RedriveState, dlq_topic

api = APIRouter(tags=["groups"], route_class=StrictRoute)


def redrive_json(broker: Broker, r: Redrive) -> dict[str, Any]:
    dlq = dlq_topic(r.group)
    after = max(0, broker.store.get_max_offset_in_queue(dlq, 0) - max(r.position, broker.store.get_min_offset_in_queue(dlq, 0)))
    return {
        "group": r.group, "state": r.state.value, "dead_letter_topic": dlq, "start_offset": r.start, "end_offset": r.end,
        "position": r.position, "total": r.total, "moved": r.moved, "skipped": r.skipped, "remaining": r.end - r.position,
        "started_ms": r.started_ms, "finished_ms": r.finished_ms if r.state is RedriveState.DONE else None, "dead_letters_after": after,
    }  # fmt: skip


@api.post(
    "/v1/groups/{group}/dlq/redrive",
    operation_id="startRedrive",
    summary="Move the group's dead letters back to be received again (all, or max_messages); progress in the GET",
    status_code=202,
    responses={
        **docs(RedriveInfo, 202, "GROUP_INVALID", "BODY_INVALID", "NOT_MASTER", "REDRIVE_RUNNING", "REDRIVE_NOT_SUPPORTED",
               "STORE_WRITE_FAILED"),
        202: {"description": "Accepted: the redrive is recorded and runs", "model": RedriveInfo},
    },
)  # fmt: skip
async def start_redrive(broker: BrokerDep, group: GroupPath, body: Annotated[RedriveRequest | None, Body()] = None) -> Response:
    check_group(group)
    broker.check_master()
    gc = broker.store.group_consumption
    if gc.group(group).fifo:
        raise ProblemError("REDRIVE_NOT_SUPPORTED", f"group {group} is a FIFO group: its receives do not read the retry topic")
    max_messages = body.max_messages if body is not None else None
    redrive, started = await broker.run(gc.start_redrive, group, max_messages)
    if not started:
        raise ProblemError("REDRIVE_RUNNING", f"a redrive of group {group} runs already", {"redrive": redrive_json(broker, redrive)})
    return JsonResponse(redrive_json(broker, redrive), 202)


@api.get(
    "/v1/groups/{group}/dlq/redrive",
    operation_id="getRedrive",
    summary="The group's latest dead-letter redrive and its progress",
    responses=docs(RedriveInfo, 200, "GROUP_INVALID", "NOT_FOUND"),
)
async def get_redrive(broker: BrokerDep, group: GroupPath) -> Response:
    check_group(group)
    redrive = broker.store.group_consumption.redrive(group)
    if redrive is None:
        raise ProblemError("NOT_FOUND", f"group {group} has never been redriven")
    return JsonResponse(redrive_json(broker, redrive))
