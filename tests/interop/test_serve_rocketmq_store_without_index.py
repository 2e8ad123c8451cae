"""A copy of a RocketMQ store whose index/ is missing (copied without it) or stale (copied before
the last messages were indexed): tidemq rebuilds what the index lacks from the commitlog at start,
is ready once done, and then finds every key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop.conftest import CONFIG, Served, serve
from tests.interop.rocketmq_store import INDEX_HEADER_BYTES
from tests.interop.test_serve_rocketmq_store import _check_every_key

# Any gap in the index is rebuilt by the background service (not during recovery), as for a
# RocketMQ store of real size: the path that keeps /readyz at 503 until it is done.
REBUILD_CONFIG = CONFIG.replace("[store]\n", "[store]\nindex_rebuild_background_min_bytes = 0\n", 1)
STALE_UPTO = 20  # the stale index holds the keys of the first 20 messages only


@pytest.fixture(scope="module")
def served_without_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    assert REBUILD_CONFIG != CONFIG
    s = serve(tmp_path_factory.mktemp("rocketmq-no-index"), with_index=False, config=REBUILD_CONFIG)
    try:
        yield s
    finally:
        s.broker.kill()


@pytest.fixture(scope="module")
def served_with_stale_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("rocketmq-stale-index"), config=REBUILD_CONFIG, index_upto=STALE_UPTO)
    try:
        yield s
    finally:
        s.broker.kill()


def _index_end(root: Path) -> int:
    """The largest endPhyOffset of the IndexFile headers under root/index."""
    ends = [int.from_bytes(p.read_bytes()[24:32], "big") for p in (root / "index").iterdir()]
    assert ends and all(len(p.read_bytes()) > INDEX_HEADER_BYTES for p in (root / "index").iterdir())
    return max(ends)


def test_a_missing_index_is_rebuilt_and_every_key_found(served_without_index: Served) -> None:
    _check_every_key(served_without_index)
    last_indexed = max(m.commitlog_offset for m in served_without_index.store.messages if m.indexed)
    assert _index_end(served_without_index.root) >= last_indexed  # past it once the overdue delayed message is delivered


def test_a_stale_index_is_completed_and_every_key_found(served_with_stale_index: Served) -> None:
    store = served_with_stale_index.store
    _check_every_key(served_with_stale_index)
    assert _index_end(served_with_stale_index.root) >= max(m.commitlog_offset for m in store.messages if m.indexed)
