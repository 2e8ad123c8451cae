"""The plain-ASGI no-op: the least a request costs through uvicorn with uvloop and httptools.

A bare ASGI callable (no framework, no middleware) answering every request with the constant
reply tidemq's /healthz sends, served the way `tidemq serve` serves (uvicorn, uvloop, httptools,
no access log, no server header). Its server CPU per request is the floor the HTTP figures are
divided by.

Usage: python bench/noop_asgi.py PORT
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import uvicorn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BODY = b'{"status":"ok"}'
START = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"15"), (b"content-type", b"application/json")]}
REPLY = {"type": "http.response.body", "body": BODY}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send(START)
    await send(REPLY)


class NoopServer:
    """This module served in a process of its own on a free loopback port."""

    def __init__(self) -> None:
        sys.path.insert(0, ROOT)
        from bench.compare_peers import free_port, tcp_open

        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(self.port)], cwd=ROOT)
        deadline = time.monotonic() + 30
        while not tcp_open(self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("the no-op server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


if __name__ == "__main__":
    uvicorn.run(
        app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http="httptools", lifespan="off",
        access_log=False, server_header=False, log_level="warning",
    )  # fmt: skip
