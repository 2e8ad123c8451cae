"""HttpCheckTransport: the broker's check-back of unresolved transactions over HTTP.

The store's TransactionCheckService (a store thread) hands each due check to `submit`, which
never blocks: the POST runs on a thread of this transport's own pool, with http.client (the standard
library's synchronous client). Threads rather than the event loop because the check service is
a store thread with no loop, a check's answer is applied by a blocking store call (the commit's
puts and their durability wait), and a slow or hanging producer must never touch the loop that
serves produce and pull; no store lock is held while a request is under way.

Bounds: at most `transaction_check_concurrency` checks at once and `transaction_check_group_concurrency`
per producer group (a check past either waits for the next pass), so a producer that answers
slowly, or drips its reply, holds at most its group's share and never delays another group's
checks; each check has `transaction_check_timeout_ms` in total (connect, request and every
byte of the reply: a watchdog thread cuts the connection at the deadline), a reply of at most
4 KiB, no redirects and no proxies (http.client follows neither). `close` (the broker stops)
cuts the checks under way, so shutdown never waits on a producer.

The request: `POST check_url`, JSON {transaction_id, producer_group, topic, queue_id, msg_id,
tags, keys, properties, body (base64), checks}. The answer: a 2xx reply with JSON {"action":
"commit" | "rollback" | "unknown"}; anything else counts as a failed check (the transaction
stays pending and is checked again).
"""

from __future__ import annotations

import base64
import collections
import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from store import TRANSACTION_PROPERTIES, CheckAnswer, CheckRequest

log = logging.getLogger("tidemq.app")
MAX_REPLY_BYTES = 4_096
WATCH_INTERVAL_S = 0.1  # how often checks are held against their deadline
_SYSTEM_PROPERTIES = frozenset({"REAL_TOPIC", "REAL_QID", "UNIQ_KEY", "TAGS", "KEYS"}) | TRANSACTION_PROPERTIES


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
    def __init__(self, timeout_ms: int, concurrency: int, group_concurrency: int = 2) -> None:
        self.timeout_s = timeout_ms / 1000.0
        self.concurrency = concurrency
        self.group_concurrency = min(group_concurrency, concurrency)
        self._slots = threading.BoundedSemaphore(concurrency)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="tidemq-txn-check")
        self._lock = threading.Lock()  # leaf lock: the per-group counts and the checks under way
        self._per_group: collections.Counter[str] = collections.Counter()
        # Checks under way: id -> (deadline, the connection's socket, set once connected).
        self._under_way: dict[int, tuple[float, list[socket.socket]]] = {}
        self._closed = threading.Event()
        # Set while checks are under way (and at close): an idle watchdog sleeps on it instead of
        # waking every WATCH_INTERVAL_S, which under load costs the event loop's requests (docs/concurrency.md).
        self._watching = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="tidemq-txn-check-deadline", daemon=True)
        self._watchdog.start()
        self.failures = 0
        self.in_flight = 0
        self.deadline_aborts = 0  # checks cut at their deadline (a producer that drips or never answers)
        self.group_refusals = 0  # checks put off because their producer group had group_concurrency under way

    def submit(self, request: CheckRequest, done: Callable[[CheckAnswer], None]) -> bool:
        group = request.half.producer_group
        with self._lock:
            if self._closed.is_set() or self._per_group[group] >= self.group_concurrency:
                self.group_refusals += not self._closed.is_set()
                return False
            if not self._slots.acquire(blocking=False):
                return False
            self._per_group[group] += 1
            self.in_flight += 1
        try:
            self._pool.submit(self._check, request, done)
        except RuntimeError:  # the pool is shut down (the broker stops)
            self._release(group)
            return False
        return True

    def _release(self, group: str) -> None:
        with self._lock:
            self.in_flight -= 1
            self._per_group[group] -= 1
            if self._per_group[group] <= 0:
                del self._per_group[group]
        self._slots.release()

    def _check(self, request: CheckRequest, done: Callable[[CheckAnswer], None]) -> None:
        try:
            answer = self._post(request)
        finally:
            self._release(request.half.producer_group)
        if not self._closed.is_set():
            done(answer)

    def _post(self, request: CheckRequest) -> CheckAnswer:
        """POST the check with one deadline for all of it (connect, request, every byte of the reply)."""
        url = urllib.parse.urlsplit(request.check_url)
        try:
            conn: http.client.HTTPConnection
            if url.scheme == "https":
                conn = http.client.HTTPSConnection(url.hostname or "", url.port, timeout=self.timeout_s)
            else:
                conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=self.timeout_s)
        except (ValueError, http.client.HTTPException) as exc:
            return self._failed(request, exc)
        key = id(conn)
        connected: list[socket.socket] = []
        with self._lock:
            self._under_way[key] = (time.monotonic() + self.timeout_s, connected)
            self._watching.set()
        try:
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            conn.connect()
            # The socket itself: http.client drops conn.sock when a reply will close the connection,
            # while the reply still reads from it.
            assert conn.sock is not None
            connected.append(conn.sock)
            conn.request("POST", path, body=check_body(request), headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            raw = reply.read(MAX_REPLY_BYTES + 1)
            answer = (
                parse_answer(raw[:MAX_REPLY_BYTES]) if 200 <= reply.status < 300 and len(raw) <= MAX_REPLY_BYTES else CheckAnswer.FAILED
            )
        except (OSError, ValueError, http.client.HTTPException) as exc:
            return self._failed(request, exc)
        finally:
            with self._lock:
                self._under_way.pop(key, None)
            conn.close()
        if answer is CheckAnswer.FAILED:
            self.failures += 1
        return answer

    def _failed(self, request: CheckRequest, exc: BaseException) -> CheckAnswer:
        self.failures += 1
        log.warning("check-back of transaction %s to %s failed: %s", request.half.transaction_id, request.check_url, exc)
        return CheckAnswer.FAILED

    def _watch(self) -> None:
        """Cut checks past their deadline: a socket timeout bounds each read, not a reply dripped byte by byte."""
        while True:
            self._watching.wait()
            if self._closed.wait(WATCH_INTERVAL_S):
                return
            now = time.monotonic()
            with self._lock:
                late = [sockets for deadline, sockets in self._under_way.values() if deadline <= now]
                if not self._under_way:
                    self._watching.clear()  # under the lock a new check sets it: none is missed
            for sockets in late:
                self.deadline_aborts += 1
                _abort(sockets)

    def close(self) -> None:
        """Stop checking: in-flight checks are cut now (their answers dropped), so nothing waits on a producer."""
        self._closed.set()
        self._watching.set()
        with self._lock:
            under_way = [sockets for _, sockets in self._under_way.values()]
        for sockets in under_way:
            _abort(sockets)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _abort(sockets: list[socket.socket]) -> None:
    """Wake the thread blocked on a check's socket: shutdown makes its recv return at once. A check
    still connecting has no socket yet; its connect timeout bounds it."""
    for sock in list(sockets):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
