"""Atomic JSON files for metadata: write a temp file, fsync it, rename over, fsync the directory.

A reader therefore sees the old or the new content, never a torn one. A `.bak` copy
of the previous content is kept, as RocketMQ's ConfigManager does, and read when the
main file is missing or cannot be parsed.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from store.errors import MetadataCorrupt

log = logging.getLogger("tidemq.store")


def write_json_atomically(path: str, data: Any) -> None:
    write_bytes_atomically(path, json.dumps(data, indent=2, sort_keys=True).encode("utf-8"), keep_backup=True)


def write_bytes_atomically(path: str, payload: bytes, mode: int = 0o644, keep_backup: bool = False) -> None:
    """Write `payload` to a temp file, fsync it, rename it over `path` (the old content to `.bak`
    when `keep_backup`), fsync the directory: a reader sees the old or the new bytes, never a mix."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    if keep_backup and os.path.exists(path):
        os.replace(path, path + ".bak")
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: str) -> Any | None:
    """The file's content, its .bak copy when the file is missing or torn, or None when neither exists."""
    for candidate in (path, path + ".bak"):
        if not os.path.exists(candidate):
            continue
        try:
            with open(candidate, "rb") as fh:
                return json.loads(fh.read())
        except (ValueError, OSError) as exc:
            log.warning("cannot read %s: %s", candidate, exc)
            continue
    if os.path.exists(path):
        raise MetadataCorrupt(f"{path} and its backup cannot be parsed")
    return None
