"""store_files(): the store's files on disk, listed with their sizes, bounded."""

from __future__ import annotations

import os
from pathlib import Path

from store import DefaultMessageStore, MessageStoreConfig, build_message
from store.logfile.store_files import list_store_files
from tests.store.conftest import wait_dispatched
from tests.waiting import wait_for


def test_lists_the_commitlog_consume_queue_and_index_files(store: DefaultMessageStore, config: MessageStoreConfig) -> None:
    assert store.put_message(build_message("files-t", b"x" * 100, queue_id=1, keys=["k1"])).stored
    wait_dispatched(store)
    # Files ordered ahead (the next commitlog file, a queue's next file) are made on the allocate
    # service's thread; one caught between its creation and its sizing lists as 0 bytes.
    wait_for(store.allocate_service.is_idle, 5.0, "files ordered ahead to be made")
    listing = store.store_files()
    by_path = {f["path"]: f for f in listing["files"]}
    commitlog = [f for f in listing["files"] if f["kind"] == "commitlog"]
    assert commitlog and commitlog[0]["path"] == os.path.join("commitlog", "0" * 20)
    assert commitlog[0]["size_bytes"] == config.mapped_file_size_commit_log_bytes
    assert any(p.startswith(os.path.join("consumequeue", "files-t", "1") + os.sep) for p in by_path)
    assert any(f["kind"] == "index" for f in listing["files"])
    assert listing["root"] == config.store_path_root_dir
    assert listing["total_bytes"] == sum(f["size_bytes"] for f in listing["files"])
    assert listing["truncated"] is False
    assert [f["path"] for f in listing["files"]] == sorted(by_path)
    for f in listing["files"]:
        on_disk = os.stat(os.path.join(config.store_path_root_dir, f["path"]))
        assert f["size_bytes"] == on_disk.st_size


def test_stops_at_the_limit_and_says_so(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(b"ab")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g").write_bytes(b"abc")
    full = list_store_files(str(tmp_path))
    assert not full["truncated"] and len(full["files"]) == 6
    assert {f["kind"] for f in full["files"]} == {"root", "sub"}
    cut = list_store_files(str(tmp_path), limit=3)
    assert cut["truncated"] and len(cut["files"]) == 3


def test_a_missing_root_lists_nothing(tmp_path: Path) -> None:
    listing = list_store_files(str(tmp_path / "absent"))
    assert listing["files"] == [] and listing["total_bytes"] == 0 and not listing["truncated"]
