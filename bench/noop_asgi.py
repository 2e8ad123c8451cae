"""The plain-ASGI no-op: the least a request costs through uvicorn with uvloop and httptools.

A bare ASGI callable (no framework, no middleware) answering every request with the constant
reply tidemq's /healthz sends, served the way `tidemq serve` serves (uvicorn, uvloop, httptools,
no access log, no server header). Its server CPU per request is the floor the HTTP figures are
divided by.

Usage: python bench/noop_asgi.py PORT
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

BODY = b'{"status":"ok"}'
START = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"15"), (b"content-type", b"application/json")]}
REPLY = {"type": "http.response.body", "body": BODY}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send(START)
    await send(REPLY)


if __name__ == "__main__":
    uvicorn.run(
        app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http="httptools", lifespan="off",
        access_log=False, server_header=False, log_level="warning",
    )  # fmt: skip
