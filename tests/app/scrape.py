"""A scrape of /metrics parsed into samples, and the traffic that makes every hot route appear in it."""

from __future__ import annotations

import re

import httpx

from tests.app.helpers import send

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """metric name -> [(labels, value)] of every sample line."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        out.setdefault(name, []).append((dict(LABEL.findall(labels or "")), float(value)))
    return out


def value(scrape: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    """The one sample of `name` with these labels (0 when there is none: a series appears with its first count)."""
    found = [v for have, v in scrape.get(name, []) if all(have.get(k) == want for k, want in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else 0.0


def serve_hot_routes(client: httpx.Client, topic: str, group: str) -> None:
    """The topic created, then one produce, pull, receive and ack (each answered 2xx), a GET and a HEAD /healthz."""
    assert client.put(f"/v1/topics/{topic}", json={"queues": 4}).status_code in (200, 201)
    send(client, topic, "hello", queue_id=0)
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0})
    assert pulled.status_code == 200 and pulled.json()["status"] == "FOUND", pulled.text
    received = client.post(f"/v1/groups/{group}/topics/{topic}/receive", params={"max": 4, "wait_ms": 2000})
    assert received.status_code == 200, received.text
    handles = [m["receipt_handle"] for m in received.json()["messages"]]
    assert handles, received.text
    acked = client.post(f"/v1/groups/{group}/topics/{topic}/ack", json={"receipt_handles": handles})
    assert acked.status_code == 200 and [r["status"] for r in acked.json()["results"]] == ["OK"] * len(handles), acked.text
    assert client.get("/healthz").status_code == 200
    assert client.head("/healthz").status_code == 200
