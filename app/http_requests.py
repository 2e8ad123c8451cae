"""HTTP requests observed: counts, latency and bytes per route, method and status, and the access log.

The server's outermost ASGI callable (app.hot_routes) records each request here: per request it
reads a monotonic clock twice, notes the reply's status and body bytes, and adds integers to
`RequestStats`; with `access_log` on it also logs one line on `tidemq.access` (`log_request`).

Invariants that bound what /metrics exports:
- The route label is a route template, never the raw path: the hot routes put their template
  in the scope (`ROUTE_KEY`), FastAPI's router leaves the matched route in `scope["route"]`;
  a request matched by neither (refused before routing, or no such route) is `ROUTE_OTHER`.
- The method label is one of `METHODS` or `OTHER`; the status is an HTTP status code.
So the series are at most routes x methods x statuses, whatever the clients send.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from typing import Any

from starlette.types import Scope

from app.logs import ACCESS_LOGGER

access_log = logging.getLogger(ACCESS_LOGGER)
# The scope key in which the hot routes name the route template they serve.
ROUTE_KEY = "tidemq.route"
ROUTE_OTHER = "other"
METHODS = {m: m for m in ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")}
# Upper bounds (seconds) of the latency histogram's buckets; long-polls are held up to 300 s.
BOUNDS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BOUNDS_NS = tuple(round(b * 1e9) for b in BOUNDS_S)
# Access log fields the line's message already says (the text format leaves them out).
IN_MESSAGE = ("method", "path", "status")
# Characters of the raw path an access log line keeps.
MAX_LOGGED_PATH = 200


class Tally:
    """One (route, method, status)'s figures: requests, latency histogram (nanoseconds), bytes sent."""

    __slots__ = ("requests", "duration_ns", "buckets", "bytes")

    def __init__(self) -> None:
        self.requests = 0
        self.duration_ns = 0
        self.buckets = [0] * (len(BOUNDS_NS) + 1)  # the last: above every bound
        self.bytes = 0

    def add(self, duration_ns: int, sent: int) -> None:
        """Count one request that took `duration_ns` and sent `sent` body bytes."""
        self.requests += 1
        self.duration_ns += duration_ns
        self.buckets[bisect_left(BOUNDS_NS, duration_ns)] += 1
        self.bytes += sent


class RequestStats:
    """route -> method -> status -> Tally, and the requests under way; updated on the event loop only."""

    def __init__(self) -> None:
        self.tallies: dict[str, dict[str, dict[int, Tally]]] = {}
        self.in_flight = 0

    def add(self, route: str, method: str, status: int, duration_ns: int, sent: int) -> None:
        self.tally(route, method, status).add(duration_ns, sent)

    def tally(self, route: str, method: str, status: int) -> Tally:
        """The figures of (route, method, status), made at the first ask; kept by a caller that counts one series
        often (the produce lane's 201s) so that a request is one `Tally.add`."""
        by_method = self.tallies.get(route)
        if by_method is None:
            by_method = self.tallies[route] = {}
        by_status = by_method.get(method)
        if by_status is None:
            by_status = by_method[method] = {}
        tally = by_status.get(status)
        if tally is None:
            tally = by_status[status] = Tally()
        return tally

    def rows(self) -> list[tuple[str, str, int, Tally]]:
        """(route, method, status, tally), sorted: the order /metrics prints them in."""
        return sorted(
            ((r, m, s, t) for r, by_method in self.tallies.items() for m, by_status in by_method.items() for s, t in by_status.items()),
            key=lambda row: row[:3],
        )


def route_of(scope: Scope) -> str:
    """The route template that served the request (see the module's invariants)."""
    route = scope.get(ROUTE_KEY)
    if route is not None:
        return str(route)
    matched = scope.get("route")
    path = getattr(matched, "path", None)
    return path if isinstance(path, str) else ROUTE_OTHER


def log_request(scope: Scope, method: str, route: str, status: int, duration_ns: int, sent: int) -> None:
    """The access log line: `METHOD path status`, with route, duration, bytes and client as fields."""
    client: Any = scope.get("client")
    path = scope["path"][:MAX_LOGGED_PATH]
    fields = {
        "method": method,
        "path": path,
        "route": route,
        "status": status,
        "duration_ms": round(duration_ns / 1e6, 3),
        "bytes": sent,
        "client": f"{client[0]}:{client[1]}" if client else "-",
    }
    if access_log.isEnabledFor(logging.INFO):
        # The record is made directly: Logger.info would also walk the stack for the caller's file
        # and line, which no format prints and which costs more than the rest of the line.
        args = (method, path, status)
        record = access_log.makeRecord(
            ACCESS_LOGGER, logging.INFO, __file__, 0, "%s %s %d", args, None, extra={**fields, "_in_message": IN_MESSAGE}
        )
        access_log.handle(record)
