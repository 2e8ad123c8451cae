"""Operations: /healthz (GET and HEAD), /readyz, /metrics, /v1/store and /v1/store/files.

While the store loads, /readyz answers 503 STARTING with the recovery's progress (phase, bytes
scanned of total) and /healthz 200; the other routes are held off by app.startup.StartupGate.
While the index is rebuilt after start (store/dispatch/index_rebuild_service.py), /readyz answers 503
INDEX_REBUILDING with the rebuild's progress; the other routes are served.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import PlainTextResponse, Response

from app import metrics
from app.broker import BrokerDep
from app.models import Health, StoreFiles, StoreStatus
from app.problems import ProblemError
from app.responses import JsonResponse, docs, problem_doc
from app.startup import recovery_progress
from app.strict_route import StrictRoute
from store import INDEX_REBUILD_PHASE

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"


api = APIRouter(tags=["operations"], route_class=StrictRoute)


@api.get(
    HEALTH_PATH,
    operation_id="health",
    summary="The process is alive",
    responses={
        **problem_doc("INTERNAL_ERROR"),
        200: {"description": "OK", "model": Health, "content": {"application/json": {"example": {"status": "ok"}}}},
    },
)
async def health() -> Response:
    return JsonResponse({"status": "ok"})


@api.head(
    HEALTH_PATH,
    operation_id="healthHead",
    summary="The process is alive (GET /healthz's status and headers, no body)",
    response_class=Response,
    responses={**problem_doc("INTERNAL_ERROR"), 200: {"description": "OK (no body)"}},
)
async def health_head() -> Response:
    reply = JsonResponse({"status": "ok"})
    return Response(status_code=200, headers={"content-length": reply.headers["content-length"]}, media_type="application/json")


@api.get(
    READY_PATH,
    operation_id="ready",
    summary="200 once the store is loaded, recovered, dispatch has caught up and the index is whole; 503 before and while degraded",
    responses={
        **docs(Health, 200, example={"status": "ready"}),
        **problem_doc("SERVICE_NOT_AVAILABLE", "STARTING", "INDEX_REBUILDING"),
    },
)
async def ready(broker: BrokerDep) -> Response:
    store = broker.store
    if broker.loading:
        raise ProblemError("STARTING", "the store is being loaded and recovered", recovery_progress(store))
    if not broker.ready():
        progress = recovery_progress(store)
        if broker.started and progress.get("phase") == INDEX_REBUILD_PHASE:
            raise ProblemError(
                "INDEX_REBUILDING", "the index is being rebuilt from the commitlog; key queries may miss older messages", progress
            )
        raise ProblemError("SERVICE_NOT_AVAILABLE", "the store is loading, catching up or shutting down")
    degraded = store.degraded_reasons()
    if degraded:
        raise ProblemError("SERVICE_NOT_AVAILABLE", "the store is degraded: " + "; ".join(degraded), {"degraded_reasons": degraded})
    return JsonResponse({"status": "ready"})


@api.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=PlainTextResponse,
    responses={
        **problem_doc("INTERNAL_ERROR"),
        200: {"description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}, "example": "tidemq_held_pulls 0\n"}}},
    },
)
async def prometheus(broker: BrokerDep) -> Response:
    return Response(metrics.render(broker), media_type="text/plain; version=0.0.4; charset=utf-8")


@api.get(
    "/v1/store",
    operation_id="storeStatus",
    summary="Commitlog offsets, dispatch lag, flush mode, role, replication, disk usage, cleanup, config",
    responses=docs(StoreStatus, 200),
)
async def store_status(broker: BrokerDep) -> Response:
    store = broker.store
    broker.check_running(while_stopping=True)
    config = broker.config
    return JsonResponse(
        {
            "ready": broker.ready(),
            "flush_mode": config.flush_disk_type.value,
            "role": config.broker_role.value,
            "runtime": store.runtime_info(),
            "config": config.summary(),
            "held_pulls": broker.held.held,
            "ha": broker.ha.status() if broker.ha is not None else {"role": "standalone"},
            **({"cluster": broker.cluster.status()} if broker.cluster is not None else {}),
        }
    )


@api.get(
    "/v1/store/files",
    operation_id="storeFiles",
    summary="The store's files: path, kind (commitlog, consumequeue, index, ...), size and modification time",
    responses=docs(StoreFiles, 200),
)
async def store_files(broker: BrokerDep) -> Response:
    store = broker.store
    broker.check_running(while_stopping=True)
    return JsonResponse(await broker.run(store.store_files))
