"""Loopback helpers shared by the tests that start real servers."""

from __future__ import annotations

import http.client
import re
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.waiting import wait_for

# The broker's "listening on URL" log line, in the text or the JSON log format.
LISTENING = re.compile(rb"listening on (https?://[^\s\"]+):(\d+)")


def bound_port(log_path: Path, log_from: int, proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    """The port a broker started with `--port 0` bound: its "listening on URL" log line, written to
    `log_path` after byte `log_from`; RuntimeError when it exits or says nothing in time."""

    def named_port() -> int | None:
        with open(log_path, "rb") as log:
            log.seek(log_from)
            found = LISTENING.search(log.read())
        if found is not None:
            return int(found.group(2))
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}:\n{log_path.read_text(errors='replace')[-5000:]}")
        return None

    try:
        port = wait_for(named_port, timeout_s, what="the broker to name its port", poll_s=0.02)
    except AssertionError:
        raise RuntimeError(f"broker named no bound port within {timeout_s}s:\n{log_path.read_text(errors='replace')[-5000:]}") from None
    assert port is not None  # wait_for answers a truthy value
    return port


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, for a peer that must know it before it starts (another
    process may take it before the peer binds it: a broker binds `--port 0` instead, see bound_port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raw_get(base_url: str, path: str) -> tuple[int, bytes]:
    """GET with the path sent as written (HTTP clients such as httpx resolve dot segments first)."""
    parts = urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=15)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes the connection; a reset ends it as a close does."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def wait_until_serving(
    client: httpx.Client, ended: Callable[[], str | None], timeout_s: float, poll_s: float, degraded_ok: bool = True
) -> None:
    """Poll /readyz until the broker serves: ready, or (`degraded_ok`) loaded and degraded by what the test
    set up (a full disk, say). Raises RuntimeError with `ended()`'s reason when the broker stopped
    meanwhile, or at the timeout."""

    def serving() -> bool:
        reason = ended()
        if reason is not None:
            raise RuntimeError(reason)
        try:
            r = client.get("/readyz")
        except httpx.TransportError:
            return False  # not listening yet
        return r.status_code == 200 or (degraded_ok and r.status_code == 503 and "degraded_reasons" in r.json())

    try:
        wait_for(serving, timeout_s, what="the broker to serve", poll_s=poll_s)
    except AssertionError:
        raise RuntimeError(f"broker not ready within {timeout_s}s") from None
