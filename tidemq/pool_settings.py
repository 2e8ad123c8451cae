"""What both transports' pools are made with: where the broker is, the headers of every request,
the connection limits. `SyncPool` and `AsyncPool` add their own slots and idle list in `_start`."""

from __future__ import annotations

import ssl


class PoolSettings:
    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        host_header: str,
        max_connections: int,
        connect_timeout_s: float,
        idle_expiry_s: float,
        headers: dict[str, str],
    ) -> None:
        self.host, self.port, self.ssl_context = host, port, ssl_context
        self.host_header = host_header
        self.connect_timeout_s = connect_timeout_s
        self.idle_expiry_s = idle_expiry_s
        self.headers = headers
        self._closed = False
        self._start(max_connections)

    def _start(self, max_connections: int) -> None:
        """Make the pool's own state: at most `max_connections` requests under way at once."""
        raise NotImplementedError
