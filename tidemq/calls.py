"""Every API call as data: the request to send, the statuses that mean success and how to read the
reply. The sync and the async client run the same `Call`s, so they cannot drift apart.

Invariants: a builder only builds (no I/O); `Call.wait_s` is how long the broker may hold the
request on purpose (a long poll), added to the client's timeout; a reply with a status outside
`ok` becomes a typed exception (`tidemq.errors.problem_error`), never a parsed value.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from tidemq.batch_codec import BATCH_MEDIA_TYPE, BatchMessage, decode_stored, encode_batch
from tidemq.errors import ProblemError, ProtocolError, problem_error
from tidemq.http_wire import Query, Request, Response, path
from tidemq.models import AckResult, BinaryBatchResult, Message, PullResult, QueueLag, SendResult, TopicInfo

T = TypeVar("T")
JSON = {"content-type": "application/json"}
OutgoingMessage = BatchMessage | bytes | str


@dataclass(slots=True)
class Call(Generic[T]):
    request: Request
    ok: tuple[int, ...]
    parse: Callable[[Response], T]
    wait_s: float = 0.0

    def result(self, response: Response) -> T:
        if response.status not in self.ok:
            raise error_of(response)
        try:
            return self.parse(response)
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(f"unexpected reply to {self.request.method} {self.request.path}: {e}") from e


def error_of(response: Response) -> ProblemError:
    return problem_error(response.status, response.header("content-type"), response.body, response.header("retry-after"))


def _json(response: Response) -> Any:
    return orjson.loads(response.body)


def _as_bytes(body: bytes | str) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else body


def _message_json(m: OutgoingMessage, queue_id: int | None, delay_ms: int | None = None) -> dict[str, Any]:
    if not isinstance(m, BatchMessage):
        m = BatchMessage(_as_bytes(m))
    try:
        out: dict[str, Any] = {"body": m.body.decode("utf-8")}
    except UnicodeDecodeError:
        out = {"body": base64.b64encode(m.body).decode("ascii"), "encoding": "base64"}
    for name, value in (("tags", m.tags), ("keys", m.keys or None), ("msg_id", m.msg_id), ("properties", m.properties or None)):
        if value is not None:
            out[name] = value
    if queue_id is not None:
        out["queue_id"] = queue_id
    if delay_ms is not None:
        out["delay_ms"] = delay_ms
    return out


def produce(
    topic: str,
    body: bytes | str,
    *,
    tags: str | None = None,
    keys: Sequence[str] = (),
    msg_id: str | None = None,
    queue_id: int | None = None,
    sharding_key: str | None = None,
    delay_level: int | None = None,
    delay_ms: int | None = None,
    deliver_at_ms: int | None = None,
    properties: dict[str, str] | None = None,
    idempotency_key: str | None = None,
) -> Call[SendResult]:
    """One message. Without user properties it is a raw body with the fields as query parameters
    (the broker's cheapest path); with them, one JSON message. With `idempotency_key` (1..128 printable
    ASCII characters, no space) a resend within the broker's dedup_window_s stores nothing and returns
    the first message's ids with `duplicate` True, so a retry after a timeout or a failover is safe."""
    extra = {} if idempotency_key is None else {"idempotency-key": idempotency_key}
    target = path("v1", "topics", topic, "messages")
    fields: dict[str, Any] = {"tags": tags, "msg_id": msg_id, "queue_id": queue_id, "sharding_key": sharding_key}
    fields.update(delay_level=delay_level, delay_ms=delay_ms, deliver_at_ms=deliver_at_ms)
    if properties:
        doc = _message_json(BatchMessage(_as_bytes(body), tags, list(keys), msg_id, properties), queue_id)
        doc.update({k: v for k, v in fields.items() if v is not None and k not in doc})
        request = Request("POST", target, headers={**JSON, **extra}, body=orjson.dumps(doc))
    else:
        query: Query = {**fields, "keys": ",".join(keys) if keys else None}
        request = Request("POST", target, query, {"content-type": "application/octet-stream", **extra}, _as_bytes(body))
    return Call(request, (201, 200), lambda r: SendResult.from_json(_json(r)))


def produce_batch(
    topic: str,
    messages: Sequence[OutgoingMessage],
    queue_id: int | None = None,
    delay_ms: int | None = None,
    dedup_ids: Sequence[str | None] | None = None,
) -> Call[list[SendResult]]:
    """Messages as one JSON batch (each may carry its own tag, keys, id and properties). `dedup_ids`, one per
    message, makes the batch idempotent: when every id was seen within the broker's dedup_window_s nothing is
    stored and the results are the first messages' (each `duplicate`); a batch mixing seen and new ids is
    refused (409 DEDUP_PARTIAL)."""
    docs = [_message_json(m, queue_id, delay_ms) for m in messages]
    if dedup_ids is not None:
        if len(dedup_ids) != len(docs):
            raise ValueError(f"dedup_ids has {len(dedup_ids)} ids for {len(docs)} messages")
        for doc, dedup_id in zip(docs, dedup_ids, strict=True):
            if dedup_id is not None:
                doc["dedup_id"] = dedup_id
    request = Request("POST", path("v1", "topics", topic, "messages"), headers=JSON, body=orjson.dumps({"messages": docs}))
    return Call(request, (201, 200), lambda r: [SendResult.from_json(d) for d in _json(r)["results"]])


def produce_binary(
    topic: str,
    messages: Sequence[BatchMessage | bytes],
    queue_id: int | None = None,
    with_crc: bool = False,
    delay_ms: int | None = None,
) -> Call[BinaryBatchResult]:
    """Messages as one binary batch (RocketMQ's batch encoding), all into one queue; a message whose properties
    hold TIDEMQ_DEDUP_ID is idempotent as produce_batch's dedup ids are (the reply's `duplicate`)."""
    query: Query = {"queue_id": queue_id, "delay_ms": delay_ms}
    body = encode_batch(messages, with_crc)
    request = Request("POST", path("v1", "topics", topic, "messages"), query, {"content-type": BATCH_MEDIA_TYPE}, body)
    return Call(request, (201, 200), lambda r: BinaryBatchResult.from_json(_json(r)))


def _pull_from_headers(r: Response) -> PullResult:
    h = r.headers
    return PullResult(
        h["x-tidemq-status"],
        int(h["x-tidemq-next-offset"]),
        int(h["x-tidemq-min-offset"]),
        int(h["x-tidemq-max-offset"]),
        decode_stored(r.body),
    )


def _pull_from_json(r: Response) -> PullResult:
    d = _json(r)
    return PullResult(d["status"], d["next_offset"], d["min_offset"], d["max_offset"], [Message.from_json(m) for m in d["messages"]])


def pull(
    topic: str,
    queue_id: int,
    offset: int | None = None,
    *,
    max_messages: int = 32,
    wait_ms: int = 0,
    tag: str | None = None,
    group: str | None = None,
    stored_format: bool = True,
    sql: str | None = None,
) -> Call[PullResult]:
    """A pull from `offset` (or the group's committed one); a long poll with `wait_ms`.
    `stored_format` asks for the stored bytes, decoded here, instead of JSON: less work on both
    sides for the same messages. `tag` or `sql` (an SQL92 expression over the properties) filters."""
    query: Query = {"offset": offset, "max": max_messages, "wait_ms": wait_ms or None, "tag": tag, "sql": sql, "group": group}
    headers = {"accept": BATCH_MEDIA_TYPE} if stored_format else {}
    request = Request("GET", path("v1", "topics", topic, "queues", str(queue_id), "messages"), query, headers)
    return Call(request, (200,), _pull_from_headers if stored_format else _pull_from_json, wait_ms / 1000.0)


def receive(
    group: str, topic: str, *, max_messages: int = 32, invisible_ms: int = 30_000, wait_ms: int = 0, tag: str | None = None,
    sql: str | None = None,
) -> Call[list[Message]]:  # fmt: skip
    """Group consumption: up to `max_messages`, invisible to the group for `invisible_ms` unless acked;
    `tag` or `sql` filters this receive (on top of the group's own filter)."""
    query: Query = {"max": max_messages, "invisible_ms": invisible_ms, "wait_ms": wait_ms or None, "tag": tag, "sql": sql}
    request = Request("POST", path("v1", "groups", group, "topics", topic, "receive"), query)
    return Call(request, (200,), lambda r: [Message.from_json(m) for m in _json(r)["messages"]], wait_ms / 1000.0)


def ack(group: str, topic: str, receipt_handles: Sequence[str]) -> Call[list[AckResult]]:
    body = orjson.dumps({"receipt_handles": list(receipt_handles)})
    request = Request("POST", path("v1", "groups", group, "topics", topic, "ack"), headers=JSON, body=body)
    return Call(request, (200,), lambda r: [AckResult(d["receipt_handle"], d["status"]) for d in _json(r)["results"]])


def change_invisible(group: str, topic: str, receipt_handle: str, invisible_ms: int) -> Call[tuple[str, int]]:
    """A received message stays invisible for `invisible_ms` from now: (its new handle, until when)."""
    body = orjson.dumps({"receipt_handle": receipt_handle, "invisible_ms": invisible_ms})
    request = Request("POST", path("v1", "groups", group, "topics", topic, "invisible"), headers=JSON, body=body)
    return Call(request, (200,), lambda r: (_json(r)["receipt_handle"], _json(r)["invisible_until_ms"]))


def stream_request(
    group: str, topic: str, *, max_in_flight: int = 32, invisible_ms: int = 30_000, tag: str | None = None, sql: str | None = None
) -> Request:
    query: Query = {"max_in_flight": max_in_flight, "invisible_ms": invisible_ms, "tag": tag, "sql": sql}
    return Request("GET", path("v1", "groups", group, "topics", topic, "stream"), query, {"accept": "text/event-stream"})


def topics() -> Call[list[TopicInfo]]:
    return Call(Request("GET", "/v1/topics"), (200,), lambda r: [TopicInfo.from_json(t) for t in _json(r)["topics"]])


def topic(name: str) -> Call[TopicInfo]:
    return Call(Request("GET", path("v1", "topics", name)), (200,), lambda r: TopicInfo.from_json(_json(r)))


def create_topic(name: str, queues: int | None = None, perm: str = "rw") -> Call[TopicInfo]:
    body = orjson.dumps({"perm": perm} if queues is None else {"queues": queues, "perm": perm})
    request = Request("PUT", path("v1", "topics", name), headers=JSON, body=body)
    return Call(request, (200, 201), lambda r: TopicInfo.from_json(_json(r)))


def delete_topic(name: str) -> Call[None]:
    return Call(Request("DELETE", path("v1", "topics", name)), (204,), lambda r: None)


def groups() -> Call[list[dict[str, Any]]]:
    """Every group the broker knows, as the JSON of docs/http-api.md (`GroupInfo`)."""
    return Call(Request("GET", "/v1/groups"), (200,), lambda r: list(_json(r)["groups"]))


def start_redrive(group: str, max_messages: int | None = None) -> Call[dict[str, Any]]:
    """Move the group's dead letters back to be received again (docs/http-api.md, "Dead-letter redrive"); the redrive's JSON."""
    body = orjson.dumps({"max_messages": max_messages} if max_messages is not None else {})
    return Call(Request("POST", path("v1", "groups", group, "dlq", "redrive"), headers=JSON, body=body), (202,), _json)


def redrive(group: str) -> Call[dict[str, Any]]:
    """The group's latest dead-letter redrive and its progress (`RedriveInfo`)."""
    return Call(Request("GET", path("v1", "groups", group, "dlq", "redrive")), (200,), _json)


def group(name: str) -> Call[dict[str, Any]]:
    """One group: settings, topics with lag and counts, dead letters, connected consumers (`GroupInfo`)."""
    return Call(Request("GET", path("v1", "groups", name)), (200,), _json)


def delete_group(name: str) -> Call[None]:
    """Delete a group's settings and committed offsets."""
    return Call(Request("DELETE", path("v1", "groups", name)), (204,), lambda r: None)


def resend_dead_letters(group: str, offsets: Sequence[int]) -> Call[list[dict[str, Any]]]:
    """Send dead letters (offsets in `%DLQ%{group}` queue 0) back to the group; each offset's result."""
    body = orjson.dumps({"offsets": list(offsets)})
    request = Request("POST", path("v1", "groups", group, "dead-letters", "resend"), headers=JSON, body=body)
    return Call(request, (200,), lambda r: list(_json(r)["results"]))


def configure_group(group: str, max_reconsume_times: int = 16, fifo: bool = False, sql: str | None = None) -> Call[dict[str, Any]]:
    """Create or replace a group's settings (a PUT: every setting is given, `sql` None means no filter)."""
    settings: dict[str, Any] = {"max_reconsume_times": max_reconsume_times, "fifo": fifo}
    if sql is not None:
        settings["filter"] = {"sql": sql}
    body = orjson.dumps(settings)
    return Call(Request("PUT", path("v1", "groups", group), headers=JSON, body=body), (200, 201), _json)


def offsets(group: str, topic: str) -> Call[list[QueueLag]]:
    request = Request("GET", path("v1", "groups", group, "offsets"), {"topic": topic})
    return Call(request, (200,), lambda r: [QueueLag(**q) for q in _json(r)["queues"]])


def commit_offset(group: str, topic: str, queue_id: int, offset: int) -> Call[None]:
    body = orjson.dumps({"topic": topic, "queue_id": queue_id, "offset": offset})
    return Call(Request("PUT", path("v1", "groups", group, "offsets"), headers=JSON, body=body), (200,), lambda r: None)


def commit_offsets(group: str, commits: Sequence[tuple[str, int, int]]) -> Call[None]:
    """Commit several (topic, queue id, offset) positions of a group at once: all of them or none."""
    body = orjson.dumps([{"topic": t, "queue_id": q, "offset": o} for t, q, o in commits])
    return Call(Request("PUT", path("v1", "groups", group, "offsets"), headers=JSON, body=body), (200,), lambda r: None)


def offset_at(topic: str, queue_id: int, timestamp_ms: int) -> Call[int]:
    """The first queue offset stored at or after `timestamp_ms` (the max offset when none is)."""
    request = Request("GET", path("v1", "topics", topic, "queues", str(queue_id), "offset"), {"timestamp_ms": timestamp_ms})
    return Call(request, (200,), lambda r: int(_json(r)["offset"]))


def query(
    topic: str,
    *,
    key: str | None = None,
    msg_id: str | None = None,
    begin_ms: int | None = None,
    end_ms: int | None = None,
    max_messages: int = 32,
) -> Call[list[Message]]:
    """Messages by key or by client message id, stored in [begin_ms, end_ms], from the broker's index."""
    q: Query = {"key": key, "msg_id": msg_id, "begin_ms": begin_ms, "end_ms": end_ms, "max": max_messages}
    request = Request("GET", path("v1", "topics", topic, "messages"), q)
    return Call(request, (200,), lambda r: [Message.from_json(m) for m in _json(r)["messages"]])


def message(offset_msg_id: str) -> Call[Message]:
    return Call(Request("GET", path("v1", "messages", offset_msg_id)), (200,), lambda r: Message.from_json(_json(r)))


def store_status() -> Call[dict[str, Any]]:
    return Call(Request("GET", "/v1/store"), (200,), _json)


def stream_end(data: str) -> ProblemError | None:
    """The error an `end` event of a stream stands for (the topic was deleted, the access revoked, ...);
    None when the broker is stopping, which ends a stream as a plain end of its body does."""
    body = data.encode("utf-8")
    try:
        status = orjson.loads(body).get("status")
    except (orjson.JSONDecodeError, AttributeError) as e:
        raise ProtocolError(f"unreadable stream end event: {e}") from e
    error = problem_error(status if isinstance(status, int) else 0, "application/problem+json", body)
    return None if error.code == "SHUTTING_DOWN" else error


def stream_message(data: str) -> Message:
    """One `message` event of a stream (`stream_request`)."""
    try:
        return Message.from_json(orjson.loads(data))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"unreadable stream event: {e}") from e
