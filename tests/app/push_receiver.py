"""PushReceiver: an HTTP server on loopback that records the push deliveries it gets and answers
each by a rule of the test's (a status per delivery), so tests can fail some on purpose."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.waiting import wait_for


@dataclass(slots=True)
class Delivery:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    status: int  # what the receiver answered
    received_at: float


class PushReceiver:
    """`answer(body, attempt)` gives the status for a delivery (`attempt` counts from 1 per body)."""

    def __init__(self, answer: Callable[[bytes, int], int] = lambda body, attempt: 200) -> None:
        self.answer = answer
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver._lock:
                    attempt = 1 + sum(1 for d in receiver.deliveries if d.body == body)
                    status = receiver.answer(body, attempt)
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.deliveries.append(Delivery(self.path, headers, body, status, time.monotonic()))
                try:
                    self.send_response(status)
                    if 300 <= status < 400:
                        self.send_header("location", "/elsewhere")  # where a client following redirects would go
                    self.send_header("content-length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the broker gave up on a slow answer (its timeout_ms): nothing to tell it

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="push-receiver", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def __enter__(self) -> PushReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def got(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def wait_for(self, done: Callable[[list[Delivery]], bool], timeout_s: float = 30.0) -> list[Delivery]:
        # A 1-tuple: an empty list of deliveries may meet the condition, and is falsy.
        found = wait_for(
            lambda: (seen,) if done(seen := self.got()) else None,
            timeout_s,
            what=lambda: f"the deliveries to meet the condition: {[(d.body, d.status) for d in self.got()]}",
            poll_s=0.02,
        )
        assert found is not None  # wait_for answers a truthy value
        (got,) = found
        return got
