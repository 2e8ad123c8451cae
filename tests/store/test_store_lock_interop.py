"""The store lock against another process's POSIX record lock, as a RocketMQ broker takes it
(DefaultMessageStore.start: FileChannel.tryLock(0, 1, false) on <store root>/lock)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from store import DefaultMessageStore, MessageStoreConfig, StoreLocked
from tests.store.conftest import open_store

# Holds a write record lock on byte 0 of argv[1] (what the JVM's tryLock does on Linux) until stdin closes.
PY_HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    print("locked", flush=True)
    sys.stdin.read()
    """
)
# Exit 0 when it got the lock, 3 when tryLock found it held; argv[0] is the file.
PY_TRY = textwrap.dedent(
    """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError:
        sys.exit(3)
    """
)
JAVA_TRY = textwrap.dedent(
    """
    import java.io.RandomAccessFile;
    import java.nio.channels.FileLock;

    public class TryLock {
        public static void main(String[] args) throws Exception {
            RandomAccessFile file = new RandomAccessFile(args[0], "rw");
            FileLock lock = file.getChannel().tryLock(0, 1, false);
            if (lock == null || lock.isShared() || !lock.isValid()) {
                System.exit(3);
            }
            if (args.length > 1) {
                System.out.println("locked");
                System.out.flush();
                System.in.read();
            }
            lock.release();
        }
    }
    """
)


def _held_by(argv: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    proc.stdout.close()


def test_a_record_lock_held_by_another_process_refuses_the_store(config: MessageStoreConfig) -> None:
    os.makedirs(config.store_path_root_dir, exist_ok=True)
    holder = _held_by([sys.executable, "-c", PY_HOLDER, config.lock_path()])
    try:
        with pytest.raises(StoreLocked, match="record lock"):
            DefaultMessageStore(config).load()
    finally:
        _release(holder)
    open_store(config).shutdown()  # free again once the other process let go


def test_the_store_makes_another_process_record_lock_fail(store: DefaultMessageStore, config: MessageStoreConfig) -> None:
    assert subprocess.run([sys.executable, "-c", PY_TRY, config.lock_path()], timeout=60).returncode == 3


def test_a_second_store_object_in_the_process_keeps_the_record_lock(
    store: DefaultMessageStore,
    config: MessageStoreConfig,
) -> None:
    with pytest.raises(StoreLocked):
        DefaultMessageStore(config).load()
    # The refused attempt must not have dropped the first store's record lock.
    assert subprocess.run([sys.executable, "-c", PY_TRY, config.lock_path()], timeout=60).returncode == 3


@pytest.fixture
def try_lock_class(tmp_path: Path) -> str:
    javac = shutil.which("javac")
    if javac is None or shutil.which("java") is None:
        pytest.skip("no JDK on this machine")
    src = tmp_path / "java"
    src.mkdir()
    (src / "TryLock.java").write_text(JAVA_TRY)
    subprocess.run([javac, "TryLock.java"], cwd=src, check=True, timeout=300)
    return str(src)


def test_java_try_lock_fails_while_the_store_is_open(
    try_lock_class: str,
    store: DefaultMessageStore,
    config: MessageStoreConfig,
) -> None:
    proc = subprocess.run(["java", "-cp", try_lock_class, "TryLock", config.lock_path()], timeout=300)
    assert proc.returncode == 3


def test_a_java_try_lock_refuses_the_store_and_frees_it(try_lock_class: str, config: MessageStoreConfig) -> None:
    os.makedirs(config.store_path_root_dir, exist_ok=True)
    holder = _held_by(["java", "-cp", try_lock_class, "TryLock", config.lock_path(), "hold"])
    try:
        with pytest.raises(StoreLocked):
            DefaultMessageStore(config).load()
    finally:
        _release(holder)
    open_store(config).shutdown()
    assert subprocess.run(["java", "-cp", try_lock_class, "TryLock", config.lock_path()], timeout=300).returncode == 0
