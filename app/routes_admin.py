"""Administration: delay level status (GET /v1/schedule), timer status (GET /v1/timers) and manual cleanup (POST /v1/admin/cleanup).

Invariants: neither route waits on disk on the event loop (the schedule status reads consume
queue entries in the read pool; a manual cleanup only sets a counter and wakes the cleanup
thread), and both answer 503 SERVICE_NOT_AVAILABLE while the store is not running.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.broker import BrokerDep
from app.models import CleanupStarted, ScheduleStatus, TimerStatus
from app.problems import ProblemError
from app.responses import JsonResponse, docs
from app.strict_route import StrictRoute

api = APIRouter(tags=["operations"], route_class=StrictRoute)


@api.get(
    "/v1/schedule",
    operation_id="scheduleStatus",
    summary="Per delay level: messages waiting, delivered offset, age and due time of the oldest",
    responses=docs(ScheduleStatus, 200),
)
async def schedule_status(broker: BrokerDep) -> Response:
    store = broker.store
    broker.check_running()
    return JsonResponse(await broker.run(store.schedule_status))


@api.get(
    "/v1/timers",
    operation_id="timerStatus",
    summary="Timer messages: pending count, next due time, lateness of deliveries",
    responses=docs(TimerStatus, 200, "TIMER_NOT_ENABLED"),
)
async def timer_status(broker: BrokerDep) -> Response:
    store = broker.store
    broker.check_running()
    status = await broker.run(store.timer_status)
    if not status:
        raise ProblemError("TIMER_NOT_ENABLED", "timer messages are off on this broker (timer_wheel_enable)")
    return JsonResponse(status)


@api.post(
    "/v1/admin/cleanup",
    operation_id="cleanup",
    summary="Let the next cleanup passes (manual_delete_file_rounds, 20) delete expired files at any hour; the first runs now",
    status_code=202,
    responses={**docs(None, 202), 202: {"description": "Accepted: the passes are scheduled", "model": CleanupStarted}},
)
async def cleanup(broker: BrokerDep) -> Response:
    store = broker.store
    broker.check_running()
    now_ms = store.now_ms()
    store.execute_delete_files_manually()
    # Not the store's reply: it reads the rounds back after waking the cleanup thread, which may
    # already have used one (19 instead of 20). What was granted is the configured count, from now.
    return JsonResponse({"rounds": broker.config.manual_delete_file_rounds, "next_pass_ms": now_ms}, 202)
