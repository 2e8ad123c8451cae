"""Errors as RFC 9457 problem details: the one table of codes, and the store-status mapping.

Invariants:
- Every error reply of the API is `application/problem+json` with `type`, `title`, `status`,
  `detail` and a stable `code`; codes come only from `PROBLEMS`.
- A store refusal or a non-OK put status maps to exactly one code (`PUT_REFUSALS`,
  `PUT_STATUSES`); a put whose bytes are stored but not confirmed says so in `detail`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

from core import TidemqError
from store import PutMessageResult, PutMessageStatus, PutRefusal

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "https://tidemq.dev/problems/"


@dataclass(frozen=True, slots=True)
class ProblemKind:
    status: int
    title: str


# code -> (HTTP status, title). The code is the stable part; titles may be reworded.
PROBLEMS: dict[str, ProblemKind] = {
    "REQUEST_INVALID": ProblemKind(400, "The request is malformed"),
    "BODY_INVALID": ProblemKind(400, "The request body is not valid JSON of the expected shape"),
    "BASE64_INVALID": ProblemKind(400, "A body marked base64 is not valid base64"),
    "TOPIC_INVALID": ProblemKind(400, "The topic name is invalid"),
    "GROUP_INVALID": ProblemKind(400, "The consumer group name is invalid"),
    "OFFSET_INVALID": ProblemKind(400, "The offset is invalid"),
    "WAIT_TOO_LONG": ProblemKind(400, "wait_ms is above the broker's limit"),
    "MAX_INVALID": ProblemKind(400, "max is out of range"),
    "INVISIBLE_TIME_INVALID": ProblemKind(400, "invisible_ms is out of range (1 s to 12 h)"),
    "HANDLE_INVALID": ProblemKind(400, "The receipt handle was not issued by this broker for this group and topic"),
    "TAG_INVALID": ProblemKind(400, "The tag or tag filter is invalid"),
    "FILTER_INVALID": ProblemKind(400, "The SQL92 filter expression is invalid; `position` is where (0-based)"),
    "KEY_INVALID": ProblemKind(400, "A message key is invalid"),
    "PROPERTIES_INVALID": ProblemKind(400, "A message property is invalid"),
    "DELAY_LEVEL_INVALID": ProblemKind(400, "The delay level is out of range"),
    "DELAY_TOO_LONG": ProblemKind(400, "The delivery time is further ahead than timer_max_delay_ms"),
    "TIMER_NOT_ENABLED": ProblemKind(400, "Timer messages are off on this broker (timer_wheel_enable)"),
    "MESSAGE_ID_INVALID": ProblemKind(400, "The message id is malformed"),
    "BATCH_EMPTY": ProblemKind(400, "The batch holds no message"),
    "BATCH_INVALID": ProblemKind(400, "The binary batch is malformed"),
    "QUEUE_COUNT_INVALID": ProblemKind(400, "The queue count is out of range"),
    "PRODUCER_GROUP_INVALID": ProblemKind(400, "The producer group name is invalid"),
    "CHECK_URL_INVALID": ProblemKind(400, "The check URL is not an absolute http or https URL of bounded length"),
    "TRANSACTION_INVALID": ProblemKind(400, "A transactional message cannot be delayed"),
    "DEDUP_ID_INVALID": ProblemKind(
        400, "A dedup id (Idempotency-Key, dedup_id, TIDEMQ_DEDUP_ID) is malformed, repeated in one batch, or on a transactional message"
    ),
    "DEDUP_PARTIAL": ProblemKind(
        409, "Some messages of the batch were stored before under their dedup ids and others not; nothing was stored"
    ),
    "PUSH_URL_INVALID": ProblemKind(400, "The push URL is not an absolute http or https URL without credentials or fragment"),
    "PUSH_TARGET_FORBIDDEN": ProblemKind(400, "The push URL's host is not in the broker's push_allowed_hosts"),
    "UNAUTHENTICATED": ProblemKind(401, "A known bearer token is required"),
    "FORBIDDEN": ProblemKind(403, "The account may not do this"),
    "TOPIC_NOT_WRITABLE": ProblemKind(403, "The topic does not accept messages"),
    "TOPIC_RESERVED": ProblemKind(403, "The topic is reserved for the broker's own use"),
    "NOT_MASTER": ProblemKind(403, "This broker is a slave and does not accept messages; send to its master"),
    "TOPIC_NOT_READABLE": ProblemKind(403, "The topic cannot be read"),
    "NOT_FOUND": ProblemKind(404, "No such resource"),
    "TOPIC_NOT_FOUND": ProblemKind(404, "No such topic"),
    "QUEUE_NOT_FOUND": ProblemKind(404, "No such queue in this topic"),
    "MESSAGE_NOT_FOUND": ProblemKind(404, "No such message"),
    "TRANSACTION_NOT_FOUND": ProblemKind(404, "No such transaction"),
    "PRODUCER_GROUP_NOT_FOUND": ProblemKind(404, "No such producer group"),
    "METHOD_NOT_ALLOWED": ProblemKind(405, "Method not allowed on this resource"),
    "HANDLE_EXPIRED": ProblemKind(409, "The message's invisible time has passed; it may have been delivered again"),
    "TRANSACTION_RESOLVED": ProblemKind(409, "The transaction was already resolved the other way"),
    "PUSH_LIMIT_REACHED": ProblemKind(409, "The broker holds push_max_subscriptions push subscriptions already"),
    "REDRIVE_RUNNING": ProblemKind(409, "A dead-letter redrive of this group runs already"),
    "REDRIVE_NOT_SUPPORTED": ProblemKind(409, "A FIFO group's dead letters cannot be redriven or sent back"),
    "OFFSET_OUT_OF_RANGE": ProblemKind(409, "The offset is past the queue's end (its max offset)"),
    "ALREADY_ACKED": ProblemKind(409, "The received message was already acked with this handle"),
    "HANDLE_SUPERSEDED": ProblemKind(409, "A change of the invisible time replaced this receipt handle; use the one it answered"),
    "BODY_TOO_LARGE": ProblemKind(413, "The request body is larger than the broker accepts"),
    "MESSAGE_TOO_LARGE": ProblemKind(413, "A message body is larger than the store accepts"),
    "PROPERTIES_TOO_LARGE": ProblemKind(413, "A message's properties are larger than the store accepts"),
    "BATCH_TOO_LARGE": ProblemKind(413, "The batch holds more messages than the store accepts"),
    "REQUEST_TIMEOUT": ProblemKind(408, "The request's headers or body did not arrive in time; the connection is closed"),
    "UNSUPPORTED_MEDIA_TYPE": ProblemKind(415, "Unsupported Content-Type"),
    "HEADERS_TOO_LARGE": ProblemKind(431, "The request's line and headers are larger than the broker accepts; the connection is closed"),
    "RATE_LIMITED": ProblemKind(429, "The account is over its rate limit; retry after Retry-After seconds"),
    "INTERNAL_ERROR": ProblemKind(500, "Internal error"),
    "SERVICE_NOT_AVAILABLE": ProblemKind(503, "The store is not available"),
    "PAGECACHE_BUSY": ProblemKind(503, "The store is busy; retry shortly"),
    "SHUTTING_DOWN": ProblemKind(503, "The broker is shutting down"),
    "TOO_MANY_WAITERS": ProblemKind(503, "Too many pulls are held; retry shortly"),
    "TOO_MANY_STREAMS": ProblemKind(503, "Too many event streams are open, on the broker or for this account; retry later"),
    "TOO_MANY_CONNECTIONS": ProblemKind(503, "Too many connections are open; retry shortly"),
    "HEADERS_BUSY": ProblemKind(503, "Too many request headers are being received at once; the connection is closed, retry shortly"),
    "STARTING": ProblemKind(503, "The broker is loading and recovering its store; retry shortly"),
    "INDEX_REBUILDING": ProblemKind(503, "The index is being rebuilt from the commitlog; key queries may miss older messages"),
    "READS_BUSY": ProblemKind(503, "Too many reads are queued; retry shortly"),
    "SLAVE_NOT_AVAILABLE": ProblemKind(503, "Stored, but no slave is available to replicate it"),
    "STORE_WRITE_FAILED": ProblemKind(503, "The store could not write (mapped file creation failed)"),
    "FLUSH_DISK_TIMEOUT": ProblemKind(504, "Stored, but the flush to disk did not finish in time"),
    "FLUSH_SLAVE_TIMEOUT": ProblemKind(504, "Stored, but the slave did not confirm in time"),
    "DISK_FULL": ProblemKind(503, "The disk is too full to accept messages; retry once space is freed"),
    "DISPATCH_BEHIND": ProblemKind(503, "Dispatch to the consume queues is behind or failing; retry shortly"),
    "DEDUP_PENDING": ProblemKind(503, "A put with the same dedup id is being stored now; retry shortly to learn its ids"),
    "DEDUP_WINDOW_FULL": ProblemKind(503, "The broker remembers dedup_max_keys dedup ids already; retry once older ids expire"),
    "RESOURCES_EXHAUSTED": ProblemKind(503, "The broker is out of file descriptors or memory for this request; retry shortly"),
    "NO_MASTER": ProblemKind(503, "The broker group has no master accepting writes now (election or fencing); retry shortly"),
    "NOT_ENOUGH_REPLICAS": ProblemKind(
        503, "The broker group's in-sync set is below min_in_sync_replicas; nothing was stored, retry shortly"
    ),
    "FORWARD_FAILED": ProblemKind(503, "The broker that owns this request did not answer when it was forwarded; retry shortly"),
    "CLUSTER_UNAVAILABLE": ProblemKind(503, "etcd did not answer, so no broker group could be chosen for a new topic; retry shortly"),
}

# Why the store refused a put (nothing written) -> code.
PUT_REFUSALS: dict[PutRefusal, str] = {
    PutRefusal.TOPIC_INVALID: "TOPIC_INVALID",
    PutRefusal.TOPIC_NOT_FOUND: "TOPIC_NOT_FOUND",
    PutRefusal.TOPIC_NOT_WRITABLE: "TOPIC_NOT_WRITABLE",
    PutRefusal.QUEUE_NOT_FOUND: "QUEUE_NOT_FOUND",
    PutRefusal.MESSAGE_TOO_LARGE: "MESSAGE_TOO_LARGE",
    PutRefusal.PROPERTIES_TOO_LARGE: "PROPERTIES_TOO_LARGE",
    PutRefusal.BATCH_TOO_LARGE: "BATCH_TOO_LARGE",
    PutRefusal.BATCH_EMPTY: "BATCH_EMPTY",
    PutRefusal.NOT_MASTER: "NOT_MASTER",
    PutRefusal.DISK_FULL: "DISK_FULL",
    PutRefusal.DISPATCH_BEHIND: "DISPATCH_BEHIND",
    PutRefusal.SHUTTING_DOWN: "SHUTTING_DOWN",
    PutRefusal.DELAY_TOO_LONG: "DELAY_TOO_LONG",
    PutRefusal.TIMER_INVALID: "PROPERTIES_INVALID",
    PutRefusal.TIMER_NOT_ENABLED: "TIMER_NOT_ENABLED",
    PutRefusal.DEDUP_ID_INVALID: "DEDUP_ID_INVALID",
    PutRefusal.DEDUP_PARTIAL: "DEDUP_PARTIAL",
    PutRefusal.DEDUP_PENDING: "DEDUP_PENDING",
    PutRefusal.DEDUP_WINDOW_FULL: "DEDUP_WINDOW_FULL",
}

# A non-OK put status without a refusal -> code.
PUT_STATUSES: dict[PutMessageStatus, str] = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
    PutMessageStatus.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE",
    PutMessageStatus.SERVICE_NOT_AVAILABLE: "SERVICE_NOT_AVAILABLE",
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: "STORE_WRITE_FAILED",
    PutMessageStatus.MESSAGE_ILLEGAL: "BODY_INVALID",
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: "PROPERTIES_TOO_LARGE",
    PutMessageStatus.OS_PAGECACHE_BUSY: "PAGECACHE_BUSY",
    PutMessageStatus.UNKNOWN_ERROR: "INTERNAL_ERROR",
}


class ProblemError(TidemqError):
    """Raised when a request cannot be served; the handler turns it into problem+json."""

    def __init__(self, code: str, detail: str, extra: dict[str, Any] | None = None) -> None:
        assert code in PROBLEMS, code
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.extra = extra


class StartRefused(TidemqError):
    """Raised when the broker cannot start (port in use, store locked, store unreadable); one line for the CLI."""


def problem_body(code: str, detail: str, instance: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    kind = PROBLEMS[code]
    body = {"type": TYPE_BASE + code.lower().replace("_", "-"), "title": kind.title, "status": kind.status, "detail": detail, "code": code}
    if instance is not None:
        body["instance"] = instance
    if extra:
        body.update(extra)
    return body


# Statuses Starlette raises itself (no route, wrong method, body limits) -> their problem codes.
HTTP_STATUS_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 408: "REQUEST_TIMEOUT", 413: "BODY_TOO_LARGE"}

# (code, detail, path or None, extra headers) -> a counted problem reply: app.server's ErrorMapping.problem.
ProblemReply = Callable[[str, str, str | None, dict[str, str] | None], Response]

# 503s are worth retrying soon; after a 408 the rest of the request is unknown, so the connection ends.
RETRY_AFTER = {"Retry-After": "1"}
CLOSE = {"Connection": "close"}


def problem_response(code: str, detail: str, instance: str | None = None, extra: dict[str, Any] | None = None) -> Response:
    body = problem_body(code, detail, instance, extra)
    headers = RETRY_AFTER if body["status"] == 503 else CLOSE if body["status"] == 408 else None
    return Response(orjson.dumps(body), status_code=body["status"], media_type=PROBLEM_MEDIA_TYPE, headers=headers)


def put_problem(result: PutMessageResult) -> ProblemError:
    """The problem of a put that did not end PUT_OK."""
    assert not result.ok
    if result.refusal is not PutRefusal.NONE:
        code = PUT_REFUSALS.get(result.refusal, "INTERNAL_ERROR")
        return ProblemError(code, result.detail or f"the store refused the put: {result.refusal.value}; nothing was stored")
    code = PUT_STATUSES.get(result.status, "INTERNAL_ERROR")
    if result.stored:
        detail = (
            f"{result.status.value}: the message is stored (commitlog offset {result.items[0].wrote_offset}) "
            "but not yet confirmed durable; do not resend blindly, it may be delivered twice"
        )
        return ProblemError(code, detail, {"stored": True, "commitlog_offset": result.items[0].wrote_offset})
    return ProblemError(code, result.detail or f"the put failed with {result.status.value}; nothing was stored")
