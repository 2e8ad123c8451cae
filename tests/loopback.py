"""Loopback helpers shared by the tests that start real servers."""

from __future__ import annotations

import http.client
import socket
from urllib.parse import urlsplit


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the server binds it a moment later)."""
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
