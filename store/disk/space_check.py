"""The start-up check of the store's file sizes against the volumes that hold them.

A file larger than its volume can never be filled: its writer meets DISK_FULL before the file
ends, so the log never rolls and cleanup (which never deletes the last file) can never free
space. Such a size refuses the start (ConfigInvalid, one line naming the setting). Files are
sparse and reserved in steps (store/disk/space_reservation.py), so a file only has to fit the
volume's size, not its free space; the index's header and hash slots, reserved whole when an
index file is made, are what the index needs at once. Free space that holds fewer than
FEW_FILES commitlog files is logged as a warning: puts will soon answer DISK_FULL.
"""

from __future__ import annotations

import logging
import os

from core.errors import ConfigInvalid
from store.config import MessageStoreConfig
from store.disk.disk_usage import disk_free_bytes

log = logging.getLogger("tidemq.store")

FEW_FILES = 3  # commitlog files the free space should hold before the start warns
INDEX_HEADER_BYTES = 40
INDEX_SLOT_BYTES = 4
INDEX_ENTRY_BYTES = 20


def volume_bytes(path: str) -> int:
    """The size of the volume holding `path` (its nearest existing parent); 0 when unreadable."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe)
    except OSError:
        return 0
    return st.f_blocks * st.f_frsize


def required_sizes(config: MessageStoreConfig) -> list[tuple[str, int, str]]:
    """(setting, bytes a file needs to fit, directory) for each kind of file the store makes."""
    sizes = [
        ("mapped_file_size_commit_log_bytes", config.mapped_file_size_commit_log_bytes, config.commit_log_dir()),
        ("mapped_file_size_consume_queue_bytes", config.mapped_file_size_consume_queue_bytes, config.consume_queue_dir()),
    ]
    if config.message_index_enable:
        slots = INDEX_HEADER_BYTES + INDEX_SLOT_BYTES * config.max_hash_slot_num + INDEX_ENTRY_BYTES
        sizes.append(("max_hash_slot_num", slots, config.index_dir()))
    if config.timer_wheel_enable:
        timer_dir = os.path.join(config.store_path_root_dir, "timerlog")
        sizes.append(("mapped_file_size_timer_log_bytes", config.mapped_file_size_timer_log_bytes, timer_dir))
    return sizes


def check_space(config: MessageStoreConfig) -> None:
    """Refuse sizes no volume can hold (ConfigInvalid); warn when the free space holds few files."""
    for setting, need, directory in required_sizes(config):
        total = volume_bytes(directory)
        if 0 < total < need:
            raise ConfigInvalid(f"{setting} needs {need} bytes per file but the volume of {directory} holds {total}: lower {setting}")
    free = disk_free_bytes(config.commit_log_dir())
    few = FEW_FILES * config.mapped_file_size_commit_log_bytes
    if 0 < free < few:
        log.warning(
            "the volume of %s has %d bytes free, fewer than %d commitlog files of %d bytes: puts will soon answer DISK_FULL",
            config.commit_log_dir(), free, FEW_FILES, config.mapped_file_size_commit_log_bytes,
        )  # fmt: skip
