"""Helpers shared by the front end's tests (assertions on problem replies, visible sends)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.waiting import wait_for


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Assert a problem+json reply with this status and code; return its body."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    assert body["title"] and body["detail"] and body["type"].startswith("https://")
    return body


def wait_visible(client: httpx.Client, topic: str, queue_id: int, queue_offset: int, timeout_s: float = 5.0) -> None:
    """Wait until the message at `queue_offset` is dispatched (a produce reply does not wait for that)."""
    wait_for(
        lambda: client.get(f"/v1/topics/{topic}").json()["queues"][queue_id]["max_offset"] > queue_offset,
        timeout_s,
        f"{topic}/{queue_id} offset {queue_offset} to become visible",
        poll_s=0.005,
    )


def wait_dispatched(client: httpx.Client, timeout_s: float = 10.0) -> None:
    """Wait until dispatch has reached the commitlog's end: whatever was stored so far is in the queues
    (then a message that must not be delivered, and is not there, never will be from what was stored)."""
    wait_for(lambda: client.get("/v1/store").json()["runtime"]["dispatch_lag_bytes"] == 0, timeout_s, "dispatch to catch up")


def send(client: httpx.Client, topic: str, body: str, queue_id: int | None = 0, **fields: Any) -> dict[str, Any]:
    """Produce one message and wait until pulls can see it."""
    message = {"body": body, **fields}
    if queue_id is not None:
        message["queue_id"] = queue_id
    r = client.post(f"/v1/topics/{topic}/messages", json=message)
    assert r.status_code == 201, r.text
    sent: dict[str, Any] = r.json()
    wait_visible(client, topic, sent["queue_id"], sent["queue_offset"])
    return sent


def commitlog_max(client: httpx.Client) -> int:
    """The commitlog's max offset: unchanged when a refused request stored nothing, on a broker
    nothing else writes to meanwhile (the `quiet_client` fixture's)."""
    max_offset: int = client.get("/v1/store").json()["runtime"]["commitlog_max_offset"]
    return max_offset
