"""ForwardPools: keep-alive HTTP/1.1 connections from this broker to the brokers it forwards to.

They use the Python client's transport (`tidemq.AsyncPool`: httptools' parser fed from an asyncio
Protocol, no task per request), which costs a small fraction of a general HTTP library's CPU per
request; on a shared machine that CPU is the forwarding broker's. One pool per broker address, at
most `MAX_POOLS` of them (the oldest closed past it), each with at most `max_forwards_in_flight`
connections; idle connections are dropped before the other broker's keep-alive timeout ends them.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from cluster.settings import ClusterSettings
from tidemq import AsyncPool

# Brokers with a pool at once: more than a cluster has.
MAX_POOLS = 256
# Idle connections older than this are not reused (a broker closes them after keep_alive_timeout_s, 5 s).
IDLE_EXPIRY_S = 4.0


class ForwardPools:
    def __init__(self, settings: ClusterSettings) -> None:
        self.settings = settings
        self._tls = settings.forward_tls()
        self._pools: dict[str, AsyncPool] = {}

    async def pool(self, base_url: str) -> AsyncPool:
        """The pool of the broker at `base_url` ("http://host:port" or "https://host:port")."""
        found = self._pools.get(base_url)
        if found is not None:
            return found
        if len(self._pools) >= MAX_POOLS:
            oldest = next(iter(self._pools))
            await self._pools.pop(oldest).aclose()
        parts = urlsplit(base_url)
        https = parts.scheme == "https"
        timeout_s = self.settings.forward_timeout_ms / 1000.0
        pool = AsyncPool(
            parts.hostname or "",
            parts.port or (443 if https else 80),
            self._tls if https else None,
            parts.netloc,
            self.settings.max_forwards_in_flight,
            timeout_s,
            IDLE_EXPIRY_S,
            {},
        )
        self._pools[base_url] = pool
        return pool

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()
