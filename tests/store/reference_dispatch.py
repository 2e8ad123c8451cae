"""The message-by-message Python dispatch, the reference the store's bulk dispatch is compared with.

It walks a stopped store's commitlog files with `decode_for_dispatch` and writes each message on
its own, as dispatch did before the native kernels: the queue entry (dropped for a deleted
topic's message below its cutoff, an invalid topic or queue id, or a prepared or rolled-back
transaction message) with
`ConsumeQueue.put_message_position_info`, the index keys with `IndexService.build_index`.
"""

from __future__ import annotations

import dataclasses
import os

from store import MessageStoreConfig, topic_problem
from store.codec.message_codec import DISPATCH_BLANK, decode_for_dispatch, enters_consume_queue
from store.index.index_service import IndexService
from store.queue.consume_queue import ConsumeQueue


def files_under(root: str) -> dict[str, bytes]:
    """Relative path -> bytes of every file under root."""
    out: dict[str, bytes] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = fh.read()
    return out


def index_contents(index_dir: str) -> list[bytes]:
    """The index files' bytes in name order (names are creation times, so only the order is compared)."""
    if not os.path.isdir(index_dir):
        return []
    out = []
    for name in sorted(os.listdir(index_dir)):
        with open(os.path.join(index_dir, name), "rb") as fh:
            out.append(fh.read())
    return out


def rebuild(config: MessageStoreConfig, cutoffs: dict[str, int], root: str) -> tuple[dict[str, bytes], list[bytes]]:
    """Dispatch the store's commitlog (config's root) again into `root`: (consume-queue files, index files)."""
    ref_config = dataclasses.replace(config, store_path_root_dir=root)
    levels = config.delay_levels_ms()
    queues: dict[tuple[str, int], ConsumeQueue] = {}
    index = IndexService(ref_config) if config.message_index_enable else None
    log_dir = config.commit_log_dir()
    for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
        with open(os.path.join(log_dir, name), "rb") as fh:
            buf = fh.read()
        pos = 0
        while pos < len(buf):
            size, req = decode_for_dispatch(buf, pos, len(buf), levels)
            if req is None:
                assert size == DISPATCH_BLANK or not any(buf[pos:]), "the rest of the file holds no message"
                break
            ok = req.commitlog_offset >= cutoffs.get(req.topic, -1) and enters_consume_queue(req.sys_flag)
            if ok and not topic_problem(req.topic) and 0 <= req.queue_id < config.max_topic_queue_nums:
                cq = queues.get((req.topic, req.queue_id))
                if cq is None:
                    cq = queues[(req.topic, req.queue_id)] = ConsumeQueue(
                        req.topic, req.queue_id, ref_config.consume_queue_dir(), config.mapped_file_size_consume_queue_bytes
                    )
                assert cq.put_message_position_info(
                    req.commitlog_offset, req.msg_size, req.tags_code, req.consume_queue_offset, req.store_timestamp
                )
            if index is not None:
                index.build_index(req)
            pos += size
    for cq in queues.values():
        cq.shutdown()
    if index is not None:
        index.shutdown()
    return files_under(ref_config.consume_queue_dir()), index_contents(ref_config.index_dir())


def assert_matches_reference(config: MessageStoreConfig, cutoffs: dict[str, int], scratch_root: str) -> None:
    """The stopped store's consume queues and index equal the reference's, byte for byte."""
    want_queues, want_index = rebuild(config, cutoffs, scratch_root)
    got_queues = files_under(config.consume_queue_dir()) if os.path.isdir(config.consume_queue_dir()) else {}
    assert sorted(got_queues) == sorted(want_queues)
    for path, data in want_queues.items():
        assert got_queues[path] == data, path
    got_index = index_contents(config.index_dir())
    assert [len(f) for f in got_index] == [len(f) for f in want_index], (
        f"index files: got {len(got_index)} ({[f[:40].hex() for f in got_index]}), want {len(want_index)} ({[f[:40].hex() for f in want_index]})"
    )
    for n, (got, want) in enumerate(zip(got_index, want_index, strict=True)):
        first = next((i for i in range(len(want)) if got[i] != want[i]), None)
        assert first is None, f"index file {n} differs first at byte {first}: header got {got[:40].hex()} want {want[:40].hex()}"
