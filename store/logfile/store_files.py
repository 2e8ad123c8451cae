"""The store's files as a list: what `MessageStore.store_files()` reports (GET /v1/store/files).

The walk reads only directory entries and their sizes (no file is opened), and stops after
`MAX_LISTED_FILES` entries so a directory holding far more files answers in bounded time;
`truncated` says when it stopped early.
"""

from __future__ import annotations

import os

from store.report_types import StoreFile, StoreFiles

# Most files one listing reports; a store of 1 GiB commitlog files and many queues stays well under it.
MAX_LISTED_FILES = 10_000


def _kind(relative: str) -> str:
    """The store part a file belongs to: its first path segment (commitlog, consumequeue, index, config, ...)."""
    head, sep, _ = relative.partition(os.sep)
    return head if sep else "root"


def list_store_files(root: str, limit: int = MAX_LISTED_FILES) -> StoreFiles:
    """{"root", "files": [{"path", "kind", "size_bytes", "modified_ms"}], "total_bytes", "truncated"}; paths relative to root, sorted."""
    files: list[StoreFile] = []
    truncated = False
    pending = [root]
    while pending and not truncated:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue  # removed meanwhile (cleanup, a deleted topic): not part of the store any more
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if len(files) >= limit:
                truncated = True
                break
            relative = os.path.relpath(entry.path, root)
            files.append({"path": relative, "kind": _kind(relative), "size_bytes": st.st_size, "modified_ms": st.st_mtime_ns // 1_000_000})
    files.sort(key=lambda f: f["path"])
    return {"root": root, "files": files, "total_bytes": sum(f["size_bytes"] for f in files), "truncated": truncated}
