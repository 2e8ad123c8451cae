"""POST /v1/groups/{group}/dead-letters/resend: send a group's dead letters back to it.

The dead letters are read like any topic (pull `%DLQ%{group}` queue 0, or `GET /v1/groups/{group}`'s
`dead_letters` count); this route puts copies of the chosen ones into the group's retry topic, which
only that group receives, with their reconsume times at 0 (store/pop/dead_letter_resend.py). A FIFO group reads
no retry topic, so its dead letters are not sent back this way.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body
from starlette.responses import Response

from app.broker import BrokerDep
from app.dead_letter_models import ResendRequest, ResendResult
from app.params import GroupPath
from app.problems import ProblemError, put_problem
from app.responses import JsonResponse, docs
from app.routes_groups import check_group
from app.strict_route import StrictRoute
from store import dlq_topic

api = APIRouter(tags=["groups"], route_class=StrictRoute)


@api.post(
    "/v1/groups/{group}/dead-letters/resend",
    operation_id="resendDeadLetters",
    summary="Send dead letters back to the group: copies go to its retry topic with reconsume times 0",
    responses=docs(
        ResendResult,
        200,
        "GROUP_INVALID",
        "TOPIC_NOT_FOUND",
        "REDRIVE_NOT_SUPPORTED",
        "BODY_INVALID",
        "NOT_MASTER",
        "DISK_FULL",
        "STORE_WRITE_FAILED",
    ),  # fmt: skip
)
async def resend(broker: BrokerDep, group: GroupPath, body: Annotated[ResendRequest, Body()]) -> Response:
    check_group(group)
    broker.check_master()
    if len(set(body.offsets)) != len(body.offsets):
        raise ProblemError("BODY_INVALID", "offsets must be distinct")
    gc = broker.store.group_consumption
    if gc.group(group).fifo:
        raise ProblemError(  # the group's settings, not the request, decide it: a conflict with its state
            "REDRIVE_NOT_SUPPORTED",
            f"group {group} is FIFO and reads no retry topic: produce its dead letters to their topic again instead",
        )
    if broker.store.topic_config(dlq_topic(group)) is None:
        raise ProblemError("TOPIC_NOT_FOUND", f"group {group} has no dead letters: {dlq_topic(group)} does not exist")
    results, put = await broker.run(gc.resend_dead_letters, group, body.offsets)
    if put is not None and not put.ok:
        raise put_problem(put)
    items = [{"offset": r.offset, "status": r.status, "topic": r.topic, "msg_id": r.msg_id} for r in results]
    return JsonResponse({"group": group, "results": items})
