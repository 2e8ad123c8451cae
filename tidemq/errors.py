"""The client's exceptions: one tree rooted at `TidemqClientError`, each carrying `code`, `status`
and `detail`.

- `ProblemError` and its subclasses: the broker answered with an `application/problem+json` reply
  (or another non-success status); `code` is the problem's stable code (docs/http-api.md, "Errors"),
  `status` the HTTP status, `problem` the whole reply (extras such as `master_http_address`,
  `stored`, `index` included). The subclass is chosen by status.
- `TransportError` and its subclasses: no usable reply (`status` is None); `code` is one of
  `CONNECT_FAILED`, `CONNECTION_CLOSED`, `TIMEOUT`, `PROTOCOL_ERROR`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson


class TidemqClientError(Exception):
    """Raised when a client call or command cannot complete; the root of every exception tidemq/ defines
    (the broker's refusals, transport failures, malformed batches or HTTP, command-line misuse)."""

    def __init__(self, code: str, status: int | None, detail: str, problem: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {detail}" if status is None else f"{status} {code}: {detail}")
        self.code = code
        self.status = status
        self.detail = detail
        self.problem: dict[str, Any] = problem or {}


class ProblemError(TidemqClientError):
    """Raised when the broker refuses the request; `code` says why."""

    @property
    def retry_after_s(self) -> float | None:
        value = self.problem.get("retry_after_s")
        return float(value) if isinstance(value, int | float) else None


class BadRequest(ProblemError):
    """Raised on a 400: the request is malformed or out of range (nothing was stored)."""


class Unauthenticated(ProblemError):
    """Raised on a 401: no bearer token, or one the broker's ACL does not know."""


class Forbidden(ProblemError):
    """Raised on a 403: not allowed (ACL, topic permission, reserved topic, or a slave refusing writes)."""


class NotFound(ProblemError):
    """Raised on a 404: no such topic, queue, message, transaction or path."""


class Conflict(ProblemError):
    """Raised on a 409: a receipt handle expired, or a transaction was resolved the other way."""


class PayloadTooLarge(ProblemError):
    """Raised on a 413: a body, message, properties or batch over the broker's caps."""


class RateLimited(ProblemError):
    """Raised on a 429: the account is over its rate limit; `retry_after_s` says when to retry."""


class ServiceUnavailable(ProblemError):
    """Raised on a 503: a passing condition (starting, disk full, too many waiters); retry after `retry_after_s`."""


class BrokerTimeout(ProblemError):
    """Raised on a 504: stored but not confirmed in time (flush or slave); `problem["stored"]` is true."""


class TransportError(TidemqClientError):
    """Raised when no usable reply arrived, as one of the subclasses below, each naming its `code`."""

    CODE: ClassVar[str]

    def __init__(self, detail: str) -> None:
        super().__init__(self.CODE, None, detail)


class ConnectFailed(TransportError):
    """Raised when no connection to the broker could be made."""

    CODE = "CONNECT_FAILED"


class ConnectionClosed(TransportError):
    """Raised when the broker closed the connection before its reply was complete."""

    CODE = "CONNECTION_CLOSED"


class Timeout(TransportError):
    """Raised when the reply did not come within the call's timeout."""

    CODE = "TIMEOUT"


class ProtocolError(TransportError):
    """Raised when the reply is not HTTP/1.1 or not the shape the call expects."""

    CODE = "PROTOCOL_ERROR"


BY_STATUS: dict[int, type[ProblemError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    429: RateLimited,
    503: ServiceUnavailable,
    504: BrokerTimeout,
}


def problem_error(status: int, content_type: str, body: bytes, retry_after: str = "") -> ProblemError:
    """The exception for a non-success reply: its problem's code, or `HTTP_<status>` without one."""
    problem: dict[str, Any] = {}
    if content_type.startswith(("application/problem+json", "application/json")):
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            problem = parsed
    code = problem.get("code")
    detail = problem.get("detail")
    if not isinstance(code, str):
        code = f"HTTP_{status}"
    if not isinstance(detail, str):
        detail = body[:200].decode("utf-8", errors="replace") or f"HTTP status {status}"
    if retry_after.isdigit():
        problem["retry_after_s"] = int(retry_after)
    cls = BY_STATUS.get(status, ProblemError)
    return cls(code, status, detail, problem)
