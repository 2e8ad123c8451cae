"""HotRoutes: produce, pull, receive and ack served without FastAPI, its router and its middleware.

Matching a path through FastAPI's included routers, solving an endpoint's parameters and passing
through Starlette's middleware stack cost more than the store's put on these two paths, so this
plain ASGI callable is the server's outermost app: it recognises them by splitting the path and
calls the same handler the FastAPI route calls, behind the same body limit and start-up gate
the FastAPI app has as middleware (the route stays, for the spec and as the fallback). Invariants:
- Only `POST /v1/topics/{topic}/messages`, `GET /v1/topics/{topic}/queues/{queue_id}/messages`
  (and both with `/batch` appended: produceBinaryBatch, pullBatch),
  `POST /v1/groups/{group}/topics/{topic}/receive` and `.../ack` with non-empty segments, and
  `GET` and `HEAD /healthz` (a constant reply), are taken; every other request goes on unchanged.
- A request taken here carries its route template in `scope[ROUTE_KEY]` (app.http_requests).
- The handlers read `request.path_params` as strings and parse everything themselves, so both
  ways in give the same answers; errors go through the same problem mapping as the app's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.body_limit import BodyLimit
from app.http_requests import ROUTE_KEY
from app.problems import ProblemReply
from app.startup import StartupGate

Handler = Callable[[Request], Awaitable[Response]]
HEALTH_PATH = "/healthz"
_HEALTH = b'{"status":"ok"}'  # what routes_status's /healthz answers, byte for byte
HEALTH_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-length", str(len(_HEALTH)).encode()), (b"content-type", b"application/json")],
}
HEALTH_BODY = {"type": "http.response.body", "body": _HEALTH}
HEAD_BODY = {"type": "http.response.body", "body": b""}  # HEAD: the GET's headers, no body
# The route templates of the requests served here: the FastAPI routes' paths.
PRODUCE_ROUTE = "/v1/topics/{topic}/messages"
PULL_ROUTE = "/v1/topics/{topic}/queues/{queue_id}/messages"
PRODUCE_BATCH_ROUTE = PRODUCE_ROUTE + "/batch"
PULL_BATCH_ROUTE = PULL_ROUTE + "/batch"
GROUP_ROUTES = {"receive": "/v1/groups/{group}/topics/{topic}/receive", "ack": "/v1/groups/{group}/topics/{topic}/ack"}
ErrorMapper = Callable[[Request, Exception], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class HotHandlers:
    """The handlers the hot path calls: the same the FastAPI routes call."""

    produce: Handler
    produce_batch: Handler
    pull: Handler
    pull_batch: Handler
    receive: Handler
    ack: Handler


class HotRoutes:
    def __init__(
        self,
        app: ASGIApp,
        handlers: HotHandlers,
        on_error: ErrorMapper,
        problem: ProblemReply,
        broker: object,
        max_bytes: int,
        max_json_bytes: int,
    ) -> None:
        self.app = app
        self.produce = handlers.produce
        self.produce_batch = handlers.produce_batch
        self.pull = handlers.pull
        self.pull_batch = handlers.pull_batch
        self.group_actions = {"receive": handlers.receive, "ack": handlers.ack}
        self.on_error = on_error
        # The hot requests pass the gates every other request passes inside the FastAPI app.
        self.gated = BodyLimit(StartupGate(self._serve, broker, problem), max_bytes, max_json_bytes, problem)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path == HEALTH_PATH and (scope["method"] == "GET" or scope["method"] == "HEAD"):
                # The liveness answer, also the no-op ceiling the HTTP benchmark measures this server by.
                scope[ROUTE_KEY] = HEALTH_PATH
                await send(HEALTH_START)
                await send(HEALTH_BODY if scope["method"] == "GET" else HEAD_BODY)
                return
            if path.startswith("/v1/topics/") and path.endswith("/messages"):
                parts = path.split("/")  # "", "v1", "topics", topic, ("queues", id,) "messages"
                handler = None
                if len(parts) == 5 and parts[3] and scope["method"] == "POST":
                    handler = self.produce
                    scope["path_params"] = {"topic": parts[3]}
                    scope[ROUTE_KEY] = PRODUCE_ROUTE
                elif len(parts) == 7 and parts[4] == "queues" and parts[3] and parts[5] and scope["method"] == "GET":
                    handler = self.pull
                    scope["path_params"] = {"topic": parts[3], "queue_id": parts[5]}
                    scope[ROUTE_KEY] = PULL_ROUTE
                if handler is not None:
                    scope["tidemq.handler"] = handler
                    await self.gated(scope, receive, send)
                    return
            elif path.startswith("/v1/groups/") and scope["method"] == "POST":
                parts = path.split("/")  # "", "v1", "groups", group, "topics", topic, action
                handler = self.group_actions.get(parts[-1]) if len(parts) == 7 and parts[4] == "topics" else None
                if handler is not None and parts[3] and parts[5]:
                    scope["path_params"] = {"group": parts[3], "topic": parts[5]}
                    scope[ROUTE_KEY] = GROUP_ROUTES[parts[-1]]
                    scope["tidemq.handler"] = handler
                    await self.gated(scope, receive, send)
                    return
            elif path.endswith("/messages/batch") and path.startswith("/v1/topics/"):
                # Checked after the other hot paths, so that they pay nothing for it.
                parts = path.split("/")  # "", "v1", "topics", topic, ("queues", id,) "messages", "batch"
                handler = None
                if len(parts) == 6 and parts[3] and scope["method"] == "POST":
                    handler = self.produce_batch
                    scope["path_params"] = {"topic": parts[3]}
                    scope[ROUTE_KEY] = PRODUCE_BATCH_ROUTE
                elif len(parts) == 8 and parts[4] == "queues" and parts[3] and parts[5] and scope["method"] == "GET":
                    handler = self.pull_batch
                    scope["path_params"] = {"topic": parts[3], "queue_id": parts[5]}
                    scope[ROUTE_KEY] = PULL_BATCH_ROUTE
                if handler is not None:
                    scope["tidemq.handler"] = handler
                    await self.gated(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await scope["tidemq.handler"](request)
        except Exception as exc:  # mapped like the app's own exception handlers
            response = await self.on_error(request, exc)
        await response(scope, receive, send)
