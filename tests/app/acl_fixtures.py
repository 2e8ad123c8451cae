"""Tokens, an ACL file and a broker started with it, shared by the access-control tests."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker
from tests.app.in_process import InProcessBroker

OPS = "ops-token-3f9a1c"
BILLING = "billing-token-77d2e0"
LIMITED = "limited-token-0b4c55"
NEWCOMER = "newcomer-token-e81a2d"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


ACL_TEXT = f"""
[[accounts]]
name = "ops"
token_sha256 = "{sha(OPS)}"
admin = true

[[accounts]]
name = "billing"
token_sha256 = "{sha(BILLING)}"
topics = {{ "orders" = "SUB", "billing-*" = "PUB|SUB", "billing-secret" = "DENY" }}
groups = {{ "billing" = "SUB" }}

[[accounts]]
name = "limited"
token_sha256 = "{sha(LIMITED)}"
topics = {{ "limited" = "PUB" }}
rate_limit_per_s = 1
burst = 2
"""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def start_with_acl(
    make_broker: MakeBroker,
    tmp_path: Path,
    text: str = ACL_TEXT,
    config: str = "",
    name: str = "store",
    process: bool = False,
) -> tuple[BrokerProcess | InProcessBroker, Path]:
    acl = tmp_path / f"{name}-acl.toml"
    acl.write_text(text)
    broker = make_broker(SMALL_STORE + SMALL_BROKER + config, args=["--acl", str(acl)], name=name, process=process)
    return broker, acl


def as_admin(broker: BrokerProcess | InProcessBroker) -> httpx.Client:
    return httpx.Client(base_url=broker.url, headers=bearer(OPS), timeout=15.0)


def create_topics(broker: BrokerProcess | InProcessBroker, *topics: str, queues: int = 4) -> None:
    """Create topics as the administrator (topics are not created by producing)."""
    with as_admin(broker) as admin:
        for topic in topics:
            assert admin.put(f"/v1/topics/{topic}", json={"queues": queues}).status_code in (200, 201)
