"""A small tmpfs mounted for a test, so that a store meets a full disk for real (root only: skipped otherwise)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_volume(tmp_path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's notation: "12m") mounted at tmp_path/"disk" while the block runs."""
    mount = tmp_path / "disk"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here (needs root): {r.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
