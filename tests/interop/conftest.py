"""Fixtures of the interop tests: a RocketMQ-written store (tests/interop/scenario.py) served by a
real `python -m app serve` process on loopback, configured with the store's file sizes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, BrokerProcess
from tests.interop import scenario
from tests.interop.rocketmq_store import RocketMQStoreWriter
from tests.waiting import wait_for

CONFIG = scenario.TIDEMQ_STORE_SETTINGS + SMALL_BROKER
READY_TIMEOUT_S = 60.0  # an index rebuild at start may keep /readyz at 503 for a while


@dataclass
class Served:
    """The store as RocketMQ left it (the writer holds every message) and the broker serving it."""

    store: RocketMQStoreWriter
    broker: BrokerProcess

    @property
    def client(self) -> httpx.Client:
        assert self.broker.client is not None
        return self.broker.client

    @property
    def root(self) -> Path:
        return self.broker.store_dir


def wait_ready(client: httpx.Client, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Poll /readyz until 200 (bounded)."""
    last: list[httpx.Response] = []

    def ready() -> bool:
        last[:] = [client.get("/readyz")]
        return last[0].status_code == 200

    wait_for(ready, timeout_s, what=lambda: f"/readyz to answer 200: {last[0].status_code} {last[0].text}", poll_s=0.05)


def serve(directory: Path, with_index: bool = True, config: str = CONFIG, index_upto: int | None = None) -> Served:
    """Write the scenario store under `directory`/store and start a broker on it (ready when returned)."""
    store_dir = directory / "store"
    writer = scenario.build(str(store_dir), with_index=with_index, index_upto=index_upto)
    broker = BrokerProcess(store_dir, config)
    try:
        broker.start()
        assert broker.client is not None
        wait_ready(broker.client)
    except BaseException:
        broker.kill()
        raise
    return Served(writer, broker)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One broker per module over a fresh copy of the RocketMQ store, index/ included."""
    s = serve(tmp_path_factory.mktemp("rocketmq"))
    try:
        yield s
    finally:
        s.broker.kill()


@pytest.fixture(scope="module")
def rocketmq_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RocketMQStoreWriter]:
    """The RocketMQ store on disk, never served (for the offline readers)."""
    root = tmp_path_factory.mktemp("rocketmq-offline") / "store"
    return root, scenario.build(str(root))
