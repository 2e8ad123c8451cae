"""A copy of a RocketMQ store without index/ (copied without it, or the index was removed): tidemq
rebuilds the index from the commitlog at start, is ready once done, and then finds every key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.interop.conftest import Served, serve
from tests.interop.test_serve_rocketmq_store import _check_every_key


@pytest.fixture(scope="module")
def served_without_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("rocketmq-no-index"), with_index=False)
    try:
        yield s
    finally:
        s.broker.kill()


def test_index_is_rebuilt_and_every_key_found(served_without_index: Served) -> None:
    _check_every_key(served_without_index)
    assert any((served_without_index.root / "index").iterdir())
