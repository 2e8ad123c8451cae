"""The ASGI application and the uvicorn server that runs it.

Invariants:
- Every error leaves as application/problem+json with a code from `app.problems.PROBLEMS`,
  including FastAPI's validation errors (400 REQUEST_INVALID or a field's own code) and
  Starlette's 404/405; an unexpected exception is a logged 500 INTERNAL_ERROR, never a bare text.
- Request bodies are capped in size and time before they are read whole (app.body_limit);
  headers have a deadline and connections a bound (app.connections).
- The port is bound and the store locked before the store loads, which runs in the background
  while /healthz and /readyz answer (app.startup).
- On SIGTERM/SIGINT held pulls are released first (they answer NO_NEW_MSG), then uvicorn
  drains in-flight requests, then the store shuts down.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import inspect
import logging
import operator
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from app import (
    console,
    routes_admin,
    routes_cluster,
    routes_dead_letters,
    routes_groups,
    routes_produce,
    routes_pull,
    routes_push,
    routes_queries,
    routes_receive,
    routes_redrive,
    routes_status,
    routes_topics,
    routes_transactions,
)
from app.access_gate import AccessGate, AclSource
from app.acl import AclInvalid
from app.body_limit import BodyLimit
from app.broker import Broker
from app.connections import bounded_protocol
from app.direct_requests import DirectRequests
from app.dispatch_barrier import DispatchBarrier
from app.exposure import check_exposure, warn_if_open
from app.hot_routes import HotHandlers, HotRoutes
from app.logs import LISTEN_LOGGER, log_config
from app.models import BatchSendResult, BinaryBatchSendResult, Problem, ProduceBatch, ProduceMessage, SendResult
from app.open_files import fit_descriptors
from app.openapi_clients import API_VERSION, fit_for_generators
from app.openapi_limits import apply_limits
from app.openapi_security import add_bearer_security
from app.problems import HTTP_STATUS_CODES, ProblemError, StartRefused, problem_response, put_problem
from app.produce_lane import ProduceLane
from app.receive_models import AckRequest
from app.settings import BrokerSettings
from app.startup import StartupGate, bind_listener
from app.suggestions import closest_route
from cluster.forwarding import Forwarder
from core import TidemqError
from store import StateWriteFailed, StoreLocked

log = logging.getLogger("tidemq.app")
DESCRIPTION = (
    "tidemq: a message broker spoken over plain HTTP. Produce with POST, consume with long-polling GETs, "
    "commit consumer offsets, query by key or time. Every error is application/problem+json with a stable `code`."
)
# Query and path parameters whose validation errors have a code of their own.
PARAMETER_CODES = {"offset": "OFFSET_INVALID", "max": "MAX_INVALID", "timestamp_ms": "REQUEST_INVALID"}
# Operating-system errors that mean "out of a resource for now", not a defect: answered 503, not 500.
EXHAUSTED_ERRNOS = {
    errno.EMFILE: "RESOURCES_EXHAUSTED",
    errno.ENFILE: "RESOURCES_EXHAUSTED",
    errno.ENOMEM: "RESOURCES_EXHAUSTED",
    errno.ENOSPC: "DISK_FULL",
}
# Pending connections the kernel queues for accept (uvicorn's default; the kernel caps it at somaxconn).
LISTEN_BACKLOG = 2048
# Models referenced by hand-written parts of the spec (the produce body and reply, the ack body).
EXTRA_SCHEMAS = (Problem, ProduceMessage, ProduceBatch, SendResult, BatchSendResult, BinaryBatchSendResult, AckRequest)


def _validation_code(errors: list[Any]) -> tuple[str, str]:
    parts = []
    code = "REQUEST_INVALID"
    for error in errors[:5]:
        loc = [str(p) for p in error.get("loc", ())]
        if loc and loc[0] == "body":
            code = "BODY_INVALID"
        elif len(loc) > 1 and loc[1] in PARAMETER_CODES and code == "REQUEST_INVALID":
            code = PARAMETER_CODES[loc[1]]
        why = (error.get("ctx") or {}).get("error")  # a JSON decode error's reason (e.g. a repeated name)
        parts.append(f"{'.'.join(loc)}: {error.get('msg', 'invalid')}" + (f" ({why})" if why else ""))
    return code, "; ".join(parts) or "invalid request"


def not_found_detail(request: Request) -> str:
    """NOT_FOUND's detail: the closest route (with its methods), and where every route is described."""
    path = request.url.path[:200]
    routes: dict[str, set[str]] = request.app.state.route_templates
    similar = closest_route(path, routes)
    hint = f"; did you mean {similar} ({', '.join(sorted(routes[similar]))})?" if similar is not None else "."
    return f"no resource at {path}{hint} Every route is described at /docs (the spec: /openapi.json)"


def allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    path = request.url.path
    for path_regex, route_methods in request.app.state.route_methods:
        if path_regex.match(path):
            methods |= route_methods
    return sorted(methods)


class ErrorMapping:
    """Exceptions -> problem replies, counted per code; shared by the app's handlers and HotRoutes."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def counted(
        self, code: str, detail: str, request: Request, headers: dict[str, str] | None = None, extra: dict[str, Any] | None = None
    ) -> Response:
        counts = self.broker.http_problems_total
        counts[code] = counts.get(code, 0) + 1
        response = problem_response(code, detail, request.url.path, extra)
        if headers:
            response.headers.update(headers)
        return response

    def problem(self, code: str, detail: str, path: str | None, headers: dict[str, str] | None = None) -> Response:
        """A counted problem reply outside a request handler (middleware, gates, the connection, forwarding)."""
        counts = self.broker.http_problems_total
        counts[code] = counts.get(code, 0) + 1
        response = problem_response(code, detail, path)
        if headers:
            response.headers.update(headers)
        return response

    async def __call__(self, request: Request, exc: Exception) -> Response:
        return self.answer(request, exc)

    def answer(self, request: Request, exc: BaseException) -> Response:
        """The problem reply to `exc` (the exception handlers' and HotRoutes'; it never waits)."""
        if isinstance(exc, ProblemError):
            return self.counted(exc.code, exc.detail, request, extra=exc.extra)
        if isinstance(exc, StateWriteFailed):  # an offset commit, group or topic change the store did not confirm
            problem = put_problem(exc.result)
            return self.counted(problem.code, problem.detail, request, extra=problem.extra)
        if isinstance(exc, RequestValidationError):
            code, detail = _validation_code(list(exc.errors()))
            return self.counted(code, detail, request)
        if isinstance(exc, StarletteHTTPException):
            code = HTTP_STATUS_CODES.get(exc.status_code, "REQUEST_INVALID")
            detail = str(exc.detail) if code != "NOT_FOUND" else not_found_detail(request)
            headers = dict(exc.headers or {})
            if exc.status_code == 405:
                # Starlette names only the first matching route's methods; list every route of the path.
                headers["Allow"] = ", ".join(allowed_methods(request))
                detail = f"{request.method} is not allowed here; allowed: {headers['Allow']}"
            return self.counted(code, detail, request, headers)
        if isinstance(exc, OSError) and exc.errno in EXHAUSTED_ERRNOS:
            log.warning("%s %s: %s", request.method, request.url.path, exc)
            return self.counted(EXHAUSTED_ERRNOS[exc.errno], f"{exc.strerror}; retry shortly", request, {"Retry-After": "1"})
        log.error("unexpected error serving %s %s", request.method, request.url.path, exc_info=exc)
        return self.counted("INTERNAL_ERROR", f"unexpected {type(exc).__name__}; see the broker's log", request)


def install_error_handlers(app: FastAPI, mapping: ErrorMapping) -> None:
    # Expected conditions are handled by the exception middleware, whose reply ends the request; a handler for
    # Exception alone runs in Starlette's outer error middleware, which raises again after replying, so the
    # server closes the keep-alive connection the next request of the client would use.
    for exc_class in (ProblemError, StateWriteFailed, OSError, RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(exc_class, mapping)


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """The spec: FastAPI's, with the hand-described schemas added, 422 replaced by problem 400s and the bounds
    this broker's settings decide (app.openapi_limits)."""
    schema = get_openapi(title="tidemq", version=API_VERSION, description=DESCRIPTION, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in EXTRA_SCHEMAS:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(model_schema.pop("$defs", {}))
        components[model.__name__] = model_schema
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            operation.get("responses", {}).pop("422", None)
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    add_bearer_security(schema)
    apply_limits(schema, app.state.broker.settings)
    fit_for_generators(schema)
    return schema


def include_routers(app: FastAPI, routers: list[APIRouter]) -> None:
    """The routers, the console, and the route tables of 405 and 404 replies."""
    for api_router in routers:
        app.include_router(api_router)
    console.install(app)  # /console and /docs, from package files (no CDN)
    # (path regex, methods) of every route, for the Allow header of 405 replies.
    app.state.route_methods = [
        (r.path_regex, set(r.methods or ())) for api_router in routers for r in api_router.routes if isinstance(r, APIRoute)
    ]
    # Route template -> methods, for NOT_FOUND's closest route.
    app.state.route_templates = {}
    for api_router in routers:
        for r in api_router.routes:
            if isinstance(r, APIRoute):
                app.state.route_templates.setdefault(r.path, set()).update(set(r.methods or ()) - {"HEAD"})


def guard_front(
    app: FastAPI, front: HotRoutes, broker: Broker, settings: BrokerSettings, acl_source: AclSource | None, mapping: ErrorMapping
) -> None:
    """What stands in front of the routes: the cluster's forwarder, then the ACL's gate, each when configured."""
    if broker.cluster is not None:
        # Requests this broker does not own go to their owner's master before anything else serves them.
        forwarder = Forwarder(front.dispatch, broker.cluster, settings.cluster, mapping.problem, broker.may_create_topic)
        front.guard = forwarder
        app.state.forwarder = forwarder
    if acl_source is not None:
        # Held requests and streams are re-judged when the ACL is reloaded (app.access_revocation).
        acl_source.listeners.append(broker.revocations.reloaded)
        broker.revocations.attach(acl_source.current)
        # In front of the routes and the forwarder: tokens and permissions are checked before they see a request.
        front.guard = AccessGate(front.guard or front.dispatch, acl_source, settings.metrics_public, mapping.problem)
        if broker.cluster is None:  # the gate alone: it judges the requests the connections serve themselves too
            front.gate = front.guard


def create_app(settings: BrokerSettings) -> FastAPI:
    """The app over a store built (not loaded) from `settings`; HAStartFailed when a master cannot bind its HA port."""
    # The ACL is read first: a bad file refuses the start before the store is touched.
    acl_source = AclSource(settings.acl_file, settings.acl_reload_interval_ms) if settings.acl_file else None
    broker = Broker(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.dispatch_barrier.bind(asyncio.get_running_loop())
        # The server listens while the store loads: health answers, other routes are 503 STARTING.
        broker.start_in_background(app.state.on_start_failed)
        try:
            yield
        finally:
            if getattr(app.state, "forwarder", None) is not None:
                await app.state.forwarder.aclose()
            await broker.stop()

    options: dict[str, Any] = {}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters:
        # FastAPI's own OpenTelemetry hooks look up providers on every request; tidemq serves /metrics itself.
        options["telemetry"] = {"tracing": False, "metrics": False, "logs": False}
    app = FastAPI(title="tidemq", version=API_VERSION, description=DESCRIPTION, lifespan=lifespan, docs_url=None, redoc_url=None, **options)
    app.state.broker = broker
    # The produces of one loop turn dispatched in one pass before their replies, which yield to those of the held
    # requests the pass woke (app.dispatch_barrier).
    woken = functools.partial(operator.attrgetter("woken_total"), broker.held)  # C calls: no frame a pass
    app.state.dispatch_barrier = DispatchBarrier(broker.store.dispatch_owed, woken)
    # Called with the one-line reason when the store cannot be loaded (the server then stops).
    app.state.on_start_failed = lambda reason: log.error("%s", reason)
    produce_router, producer = routes_produce.router(broker)
    produce, produce_batch = producer.serve, producer.serve_batch
    pull_router, pull, pull_batch = routes_pull.router(broker)
    routers = [routes_status.api, routes_topics.api, produce_router, pull_router]
    receive_router, receive, ack = routes_receive.router(broker)
    routers += [routes_groups.api, routes_dead_letters.api, receive_router, routes_queries.api, routes_admin.api]
    routers += [routes_push.api, routes_redrive.api, routes_transactions.api, routes_cluster.api]
    include_routers(app, routers)
    mapping = ErrorMapping(broker)
    app.state.problem = mapping.problem  # every error reply outside a handler goes through it, counted
    install_error_handlers(app, mapping)
    app.add_middleware(StartupGate, broker=broker, problem=mapping.problem)
    app.add_middleware(
        BodyLimit, max_bytes=settings.max_request_body_bytes, max_json_bytes=settings.max_json_body_bytes, problem=mapping.problem
    )
    # What the server serves: one ASGI callable outermost, which counts every request (and logs it), parses its
    # query once (a repeated name is 400) and serves the hot routes itself, in front of the FastAPI app.
    handlers = HotHandlers(produce, produce_batch, pull, pull_batch, receive, ack)
    front = HotRoutes(
        app, handlers, mapping, mapping.problem, broker, broker.http_requests, settings.access_log,
        settings.max_request_body_bytes, settings.max_json_body_bytes, serve_hot=settings.hot_routes,
    )  # fmt: skip
    guard_front(app, front, broker, settings, acl_source, mapping)
    app.state.entry = front
    # Produces the server's connections serve without an ASGI cycle (app.direct_requests).
    direct = app.state.direct_requests = DirectRequests(front)
    # Produces served from the connection's read, without a scope or a coroutine (app.produce_lane).
    if settings.produce_lane:
        direct.lane = ProduceLane(direct, producer, broker, settings.max_request_body_bytes, settings.max_json_body_bytes)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the spec
    return app


def tls_options(settings: BrokerSettings) -> dict[str, Any]:
    """uvicorn's TLS options from the broker's (already checked by BrokerSettings.validate); empty without TLS."""
    if settings.tls_cert_file is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": settings.tls_cert_file, "ssl_keyfile": settings.tls_key_file}
    if settings.tls_client_ca_file is not None:
        options.update(ssl_ca_certs=settings.tls_client_ca_file, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options


class BrokerServer(uvicorn.Server):
    """uvicorn's server, releasing held pulls as soon as a stop signal arrives."""

    def __init__(self, config: uvicorn.Config, broker: Broker) -> None:
        super().__init__(config)
        self.broker = broker
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: Any = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.broker.release_held)
        # Not uvicorn's handler: that one re-raises the signal after the shutdown, and a clean,
        # complete shutdown should exit 0. A second SIGINT still forces the exit.
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


class RestartRequested(TidemqError):
    """Raised when the cluster asked for a restart of this process (cluster/node.py); the server stopped cleanly first."""


class BrokerStart:
    """One start of the broker: the port bound, the app built, the store locked, the server made.

    Order: the port is bound, then the app is built (a master binds its HA port: HAStartFailed), then
    the store's lock is taken; `serve` then serves while the store loads in the background.
    `own_logging` False leaves the process's logging as it is (uvicorn applies no log config): for
    a process that hosts the server beside other work, whose logging belongs to that work.
    """

    def __init__(self, settings: BrokerSettings, own_logging: bool = True) -> None:
        self.settings = settings
        sys.setswitchinterval(settings.gil_switch_interval_us / 1_000_000)
        fit_descriptors(settings)
        check_exposure(settings)
        self.listener = bind_listener(settings.host, settings.port, LISTEN_BACKLOG)
        try:
            if settings.port == 0:
                settings.bound_to(self.listener.getsockname()[1])
            # The bound address (the port a `--port 0` start got), logged whatever the level (app/logs.py).
            logging.getLogger(LISTEN_LOGGER).info("listening on %s", settings.http_url())
            try:
                self.app = create_app(settings)
            except AclInvalid as e:
                raise StartRefused(str(e)) from None
            self.broker: Broker = self.app.state.broker
            # A process of its own (the CLI's): its start-up heap is frozen once the store runs (app.broker).
            self.broker.freeze_heap_after_start = own_logging
            try:
                self.broker.store.lock()
            except StoreLocked as e:
                raise StartRefused(str(e)) from None
            self.server = BrokerServer(self._uvicorn_config(own_logging), self.broker)
        except BaseException:
            self.listener.close()
            raise
        self.app.state.on_start_failed = self._on_start_failed
        if self.broker.cluster is not None:
            # A deposed master (or a diverged slave) restarts to cut its log back: a clean stop first.
            self.broker.cluster.on_restart = lambda reason: self.stop()

    def _uvicorn_config(self, own_logging: bool) -> uvicorn.Config:
        settings = self.settings
        return uvicorn.Config(
            self.app.state.entry,
            loop="uvloop",
            proxy_headers=False,  # client addresses are not used; trusting X-Forwarded-* would add a layer and a spoofing surface
            http=bounded_protocol(
                settings,
                self.app.state.problem,
                self.broker.count_send_stall,
                self.app.state.dispatch_barrier,
                self.app.state.direct_requests,
            ),
            lifespan="on",
            log_level=settings.log_level if own_logging else None,
            log_config=log_config(settings.log_level, settings.log_format) if own_logging else None,
            access_log=False,  # app.http_requests logs requests (--access-log) in the broker's own format
            server_header=False,
            timeout_graceful_shutdown=settings.graceful_shutdown_s,
            timeout_keep_alive=settings.keep_alive_timeout_s,
            backlog=LISTEN_BACKLOG,
            **tls_options(settings),
        )

    def _on_start_failed(self, reason: str) -> None:
        self.server.should_exit = True

    def stop(self) -> None:
        """Stop as SIGTERM does (held pulls released, requests drained, the store shut down); from any thread."""
        self.server.handle_exit(signal.SIGTERM, None)

    def serve(self) -> None:
        """Serve until stopped; StartRefused (one line) when the store's load or the server's start failed,
        RestartRequested when the cluster asked for a restart."""
        warn_if_open(self.settings)
        try:
            self.server.run(sockets=[self.listener])
        finally:
            self.listener.close()
        broker = self.broker
        if broker.cluster is not None and broker.cluster.restart_reason is not None:
            raise RestartRequested(broker.cluster.restart_reason)
        if broker.start_failure is not None:
            raise StartRefused(broker.start_failure)
        if not self.server.started:
            raise StartRefused("the server did not start (see the log)")


def run(settings: BrokerSettings) -> None:
    """Serve until SIGTERM/SIGINT; StartRefused (one line) when the port, the store or its load refuse the start."""
    BrokerStart(settings).serve()
