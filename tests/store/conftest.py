"""Fixtures for the store tests: tiny files so every test crosses file boundaries."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import DefaultMessageStore, MessageStoreConfig
from tests.waiting import wait_for


def small_config(root: str, **overrides: object) -> MessageStoreConfig:
    values: dict[str, object] = {
        "store_path_root_dir": root,
        "mapped_file_size_commit_log_bytes": 64 * 1024,
        "mapped_file_size_consume_queue_bytes": 20 * 64,
        "max_message_size_bytes": 8 * 1024,
        "max_hash_slot_num": 64,
        "max_index_num": 256,
        "flush_interval_commit_log_ms": 50,
        "flush_interval_consume_queue_ms": 50,
    }
    values.update(overrides)
    return MessageStoreConfig.from_dict(values)  # the overrides are named at run time: from_dict refuses an unknown one


def run_until_killed(script: str, root: str, marker: str) -> None:
    """Run `script` (Python source, argv[1] = `root`) in a process of its own, from this checkout; it must print
    `marker` and then SIGKILL itself (a crash test's writer)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script, root], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == -9 and marker in proc.stdout, proc.stderr


def open_store(config: MessageStoreConfig) -> DefaultMessageStore:
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    return store


@pytest.fixture
def config(tmp_path: Path) -> MessageStoreConfig:
    return small_config(str(tmp_path / "store"))


@pytest.fixture
def store(config: MessageStoreConfig) -> Iterator[DefaultMessageStore]:
    s = open_store(config)
    try:
        yield s
    finally:
        s.shutdown()


def wait_dispatched(store: DefaultMessageStore, timeout_s: float = 5.0) -> None:
    # The wrote position, not the readable one: with a write buffer, bytes become readable on commit.
    wait_for(
        lambda: store.reput_service.reput_from_offset >= store.commit_log.mapped_file_queue.get_max_wrote_position(),
        timeout_s,
        "dispatch to catch up",
        poll_s=0.002,
    )
