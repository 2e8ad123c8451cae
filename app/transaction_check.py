"""HttpCheckTransport: the broker's check-back of unresolved transactions over HTTP.

The store's TransactionCheckService (a store thread) hands each due check to `submit`, which
never blocks: the POST runs on a thread of this transport's own pool, with urllib (the standard
library's synchronous client). Threads rather than the event loop because the check service is
a store thread with no loop, a check's answer is applied by a blocking store call (the commit's
puts and their durability wait), and a slow or hanging producer must never touch the loop that
serves produce and pull; no store lock is held while a request is under way.

Bounds: at most `transaction_check_concurrency` checks at once (a check past it waits for the
next pass), each limited by `transaction_check_timeout_ms` per connect and read, a reply of at
most 4 KiB, no redirects and no proxies from the environment.

The request: `POST check_url`, JSON {transaction_id, producer_group, topic, queue_id, msg_id,
tags, keys, properties, body (base64), checks}. The answer: a 2xx reply with JSON {"action":
"commit" | "rollback" | "unknown"}; anything else counts as a failed check (the transaction
stays pending and is checked again).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from store import TRANSACTION_PROPERTIES, CheckAnswer, CheckRequest

log = logging.getLogger("tidemq.app")
MAX_REPLY_BYTES = 4_096
_SYSTEM_PROPERTIES = frozenset({"REAL_TOPIC", "REAL_QID", "UNIQ_KEY", "TAGS", "KEYS"}) | TRANSACTION_PROPERTIES


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a redirect is an answer the check does not understand: a failed check


def check_body(request: CheckRequest) -> bytes:
    half = request.half
    doc = {
        "transaction_id": half.transaction_id, "producer_group": half.producer_group, "topic": half.topic,
        "queue_id": half.queue_id, "msg_id": half.msg_id, "tags": half.tags, "keys": half.keys,
        "properties": {k: v for k, v in request.properties.items() if k not in _SYSTEM_PROPERTIES},
        "body": base64.b64encode(request.body).decode("ascii"), "encoding": "base64", "checks": half.checks,
    }  # fmt: skip
    return json.dumps(doc).encode("utf-8")


def parse_answer(raw: bytes) -> CheckAnswer:
    try:
        doc = json.loads(raw)
    except ValueError:
        return CheckAnswer.FAILED
    action = doc.get("action") if isinstance(doc, dict) else None
    if action in ("commit", "rollback", "unknown"):
        return CheckAnswer(action)
    return CheckAnswer.FAILED


class HttpCheckTransport:
    def __init__(self, timeout_ms: int, concurrency: int) -> None:
        self.timeout_s = timeout_ms / 1000.0
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="tidemq-txn-check")
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
        self.failures = 0
        self.in_flight = 0

    def submit(self, request: CheckRequest, done: Callable[[CheckAnswer], None]) -> bool:
        if not self._slots.acquire(blocking=False):
            return False
        self.in_flight += 1
        try:
            self._pool.submit(self._check, request, done)
        except RuntimeError:  # the pool is shut down (the broker stops)
            self._release()
            return False
        return True

    def _release(self) -> None:
        self.in_flight -= 1
        self._slots.release()

    def _check(self, request: CheckRequest, done: Callable[[CheckAnswer], None]) -> None:
        try:
            answer = self._post(request)
        finally:
            self._release()
        done(answer)

    def _post(self, request: CheckRequest) -> CheckAnswer:
        req = urllib.request.Request(
            request.check_url, data=check_body(request), method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with self._opener.open(req, timeout=self.timeout_s) as reply:
                answer = parse_answer(reply.read(MAX_REPLY_BYTES + 1)[:MAX_REPLY_BYTES])
        except (urllib.error.URLError, OSError, ValueError) as exc:
            answer = CheckAnswer.FAILED
            log.warning("check-back of transaction %s to %s failed: %s", request.half.transaction_id, request.check_url, exc)
        if answer is CheckAnswer.FAILED:
            self.failures += 1
        return answer

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
