"""A small blocking client of the tidemq HTTP API: topic metadata, batch pulls, batched produce (JSON and binary).

One `BrokerClient` per task (its connection pool is not shared across processes). Errors
the broker answers as application/problem+json raise `BrokerProblem` carrying the stable
`code`; connection failures and the 503 codes that mean "nothing was done, retry shortly"
are retried a bounded number of times, then raise `BrokerUnavailable`.

Invariants: a produce is only retried when the broker cannot have stored it (the
connection was refused, or it answered a 503 code that means nothing was written), so a
retry never duplicates a message the broker acknowledged; a pull returns the stored bytes
untouched (decode them with `store.iter_messages`).
"""

from __future__ import annotations

import base64
import struct
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import orjson

from pipeline.errors import BrokerProblem, BrokerUnavailable, OptionInvalid
from pipeline.offsets import QueueRange

BATCH_MEDIA_TYPE = "application/x-tidemq-batch"
PROBLEM_MEDIA_TYPE = "application/problem+json"
# Response headers of a batch pull (app/routes_pull.py).
HEADER_STATUS = "x-tidemq-status"
HEADER_NEXT_OFFSET = "x-tidemq-next-offset"
HEADER_MIN_OFFSET = "x-tidemq-min-offset"
HEADER_MAX_OFFSET = "x-tidemq-max-offset"
# 503 codes after which the request was certainly not carried out, so a retry is safe.
RETRYABLE_CODES = frozenset({"PAGECACHE_BUSY", "TOO_MANY_WAITERS", "SERVICE_NOT_AVAILABLE"})
MAX_PRODUCE_BATCH = 1_000  # messages per produce request: the broker's limit


@dataclass(frozen=True, slots=True)
class ClientSettings:
    url: str
    # Seconds a request may take (connect, read, write) before it fails.
    timeout_s: float = 30.0
    # Retries of a request that failed without effect (connection refused, retryable 503).
    max_retries: int = 5
    # Pause before the first retry; doubles with each further retry.
    retry_backoff_ms: int = 100


@dataclass(frozen=True, slots=True)
class TopicMeta:
    topic: str
    read_queues: int
    write_queues: int
    perm: str
    queues: dict[int, QueueRange]


@dataclass(frozen=True, slots=True)
class PullBatch:
    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    data: bytes  # stored messages, concatenated as they lie in the commitlog


def check_url(url: str | None) -> str:
    """The broker's base URL without a trailing slash; OptionInvalid unless it is http(s)://host[:port]."""
    if not url:
        raise OptionInvalid("url", "is required (the broker's base URL, e.g. http://127.0.0.1:8080)")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OptionInvalid("url", f"must be an http:// URL such as http://127.0.0.1:8080, not {url!r}")
    return url.strip().rstrip("/")


class BrokerClient:
    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self.base_url = check_url(settings.url)
        self._http = httpx.Client(base_url=self.base_url, timeout=settings.timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Topics --------------------------------------------------------------------------

    def topic(self, topic: str) -> TopicMeta:
        body = orjson.loads(self._request("GET", _topic_path(topic)).content)
        queues = {q["queue_id"]: QueueRange(q["min_offset"], q["max_offset"]) for q in body.get("queues") or []}
        return TopicMeta(body["topic"], body["read_queues"], body["write_queues"], body["perm"], queues)

    def ensure_topic(self, topic: str, queues: int, perm: str = "rw") -> None:
        self._request("PUT", _topic_path(topic), json={"queues": queues, "perm": perm})

    # Pull ----------------------------------------------------------------------------

    def pull(self, topic: str, queue_id: int, offset: int, max_messages: int, tag: str | None = None) -> PullBatch:
        params: dict[str, Any] = {"offset": offset, "max": max_messages, "wait_ms": 0}
        if tag:
            params["tag"] = tag
        path = f"{_topic_path(topic)}/queues/{queue_id}/messages"
        response = self._request("GET", path, params=params, headers={"accept": BATCH_MEDIA_TYPE})
        h = response.headers
        try:
            return PullBatch(
                h[HEADER_STATUS], int(h[HEADER_NEXT_OFFSET]), int(h[HEADER_MIN_OFFSET]), int(h[HEADER_MAX_OFFSET]), response.content
            )
        except (KeyError, ValueError) as e:
            raise BrokerProblem(
                response.status_code, "PROTOCOL_ERROR", f"batch pull reply without a valid {e} header", "GET", path
            ) from None

    # Produce -------------------------------------------------------------------------

    def produce_batch(self, topic: str, body: bytes, queue_id: int | None) -> dict[str, Any]:
        """Send a binary batch (batch_item()s joined) to one queue, round-robin when `queue_id` is None; the reply."""
        params = {} if queue_id is None else {"queue_id": queue_id}
        headers = {"content-type": BATCH_MEDIA_TYPE}
        response = self._request("POST", f"{_topic_path(topic)}/messages", content=body, params=params, headers=headers)
        reply: dict[str, Any] = orjson.loads(response.content)
        return reply

    def produce(self, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send up to MAX_PRODUCE_BATCH messages (the JSON produce shape) in one request; their send results."""
        assert 0 < len(messages) <= MAX_PRODUCE_BATCH
        payload = orjson.dumps({"messages": messages})
        response = self._request("POST", f"{_topic_path(topic)}/messages", content=payload, headers={"content-type": "application/json"})
        results: list[dict[str, Any]] = orjson.loads(response.content)["results"]
        return results

    # Transport -----------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:  # nothing was sent: safe to retry
                failure: Exception = e
            else:
                if response.status_code < 400:
                    return response
                problem = _problem_of(response, method, path)
                if problem.code not in RETRYABLE_CODES:
                    raise problem
                failure = problem
            if attempt >= self.settings.max_retries:
                raise BrokerUnavailable(f"{method} {self.base_url}{path} failed after {attempt + 1} attempts: {failure}") from failure
            time.sleep(self.settings.retry_backoff_ms * (2**attempt) / 1000.0)
            attempt += 1


def _topic_path(topic: str) -> str:
    return "/v1/topics/" + quote(topic, safe="")


def _problem_of(response: httpx.Response, method: str, path: str) -> BrokerProblem:
    code, detail = f"HTTP_{response.status_code}", response.reason_phrase
    if response.headers.get("content-type", "").startswith(PROBLEM_MEDIA_TYPE):
        try:
            body = orjson.loads(response.content)
            code, detail = str(body.get("code", code)), str(body.get("detail", detail))
        except orjson.JSONDecodeError:
            pass
    return BrokerProblem(response.status_code, code, detail, method, path)


_ITEM_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, body length


def batch_item(body: bytes, properties: dict[str, str]) -> bytes:
    """One message in RocketMQ's batch encoding (docs/http-api.md, binary batches); MAGICCODE, BODYCRC and FLAG 0.

    The caller keeps \x01 and \x02 out of the property names and values.
    """
    props = "".join(f"{k}\x01{v}\x02" for k, v in properties.items()).encode("utf-8")
    return b"".join((_ITEM_HEAD.pack(22 + len(body) + len(props), 0, 0, 0, len(body)), body, len(props).to_bytes(2, "big"), props))


def encode_body(body: bytes | str) -> tuple[str, str]:
    """A message body as the JSON produce shape carries it: (text, encoding)."""
    if isinstance(body, str):
        return body, "utf-8"
    return base64.b64encode(body).decode("ascii"), "base64"
