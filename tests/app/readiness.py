"""Waiting for a test broker to serve, shared by BrokerProcess (a subprocess) and InProcessBroker (a thread)."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx


def wait_until_serving(client: httpx.Client, ended: Callable[[], str | None], timeout_s: float, poll_s: float) -> None:
    """Poll /readyz until the broker serves: ready, or loaded and degraded by what the test set up (a full
    disk, say). Raises RuntimeError with `ended()`'s reason when the broker stopped meanwhile, or at the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reason = ended()
        if reason is not None:
            raise RuntimeError(reason)
        try:
            r = client.get("/readyz")
            if r.status_code == 200 or (r.status_code == 503 and "degraded_reasons" in r.json()):
                return
        except httpx.TransportError:
            pass
        time.sleep(poll_s)
    raise RuntimeError(f"broker not ready within {timeout_s}s")
