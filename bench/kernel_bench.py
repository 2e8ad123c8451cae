"""Micro-benchmark of the native kernels against the Python path they replace, in one run.

ns per message (best of several rounds, one thread) for:
- encode: 1 KiB bodies with TAGS, two KEYS and a UNIQ_KEY into a pre-faulted buffer;
  Python = message_codec.write_message_into per message (the reference encoder);
- dispatch scan: the same messages; Python = decode_for_dispatch + the consume-queue
  entry + key_hash of topic#key for the UNIQ_KEY and each key (what dispatch computes);
- gather: pulls of 32 consume-queue entries with a tag filter matching half of them;
  Python = the entry loop of a pull (unpack, filter, slice) + the join of the slices;
- get_message: whole pulls of 32 from a real store (tag filter matching half), the production
  MessageGetter (gather) against store.queue.reference_getter.ReferenceGetter (the Python walk).

Usage: python bench/kernel_bench.py [--messages N] [--body BYTES]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable

from store import DefaultMessageStore, GetMessageStatus, MessageStoreConfig, TagFilter
from store import native as nk
from store.codec.message import MessageInner, build_message, java_string_hash
from store.codec.message_codec import body_crc, decode_for_dispatch, message_length, write_message_into
from store.index.index_file import key_hash
from store.queue.consume_queue import ENTRY
from store.queue.message_getter import MessageGetter
from store.queue.reference_getter import ReferenceGetter

HOST = bytes([127, 0, 0, 1, 0, 0, 0x26, 0xAD])
ROUNDS = 5


def best_ns(fn: Callable[[], object], rounds: int = ROUNDS) -> int:
    best = 1 << 62
    for _ in range(rounds):
        t = time.perf_counter_ns()
        fn()
        best = min(best, time.perf_counter_ns() - t)
    return best


def make_messages(n: int, body_bytes: int) -> list[MessageInner]:
    body = bytes(range(256)) * (body_bytes // 256) + bytes(body_bytes % 256)
    return [build_message("BenchTopic", body, tags="TagA" if i % 2 else "TagB", keys=[f"order-{i}", f"user-{i % 97}"]) for i in range(n)]


def bench_encode(msgs: list[MessageInner], dest: bytearray) -> tuple[int, int, int]:
    def python_put() -> None:
        pos = 0
        for i, m in enumerate(msgs):
            total = message_length(len(m.body), len(m.topic_bytes), len(m.properties_bytes))
            write_message_into(
                dest, pos, total, m.topic_bytes, m.body, m.properties_bytes, body_crc(m.body), m.queue_id, i, pos, m.flag,
                m.sys_flag, m.born_timestamp, m.born_host, 1, HOST, 0, 0,
            )  # fmt: skip
            pos += total

    items = [(m.body, m.properties_bytes, m.flag) for m in msgs]
    batch = nk.pack_batch(items)
    out = bytearray(16 * len(msgs))

    def kernel(b: bytes) -> None:
        r = nk.encode_batch(
            dest, 0, len(dest), b, 0, out, len(msgs), topic=b"BenchTopic", queue_id=0, queue_offset=0, physical_offset=0,
            store_timestamp=1, store_host=HOST, born_timestamp=msgs[0].born_timestamp, born_host=msgs[0].born_host,
        )  # fmt: skip
        assert r.written == len(msgs)

    return best_ns(python_put), best_ns(lambda: kernel(batch)), best_ns(lambda: kernel(nk.pack_batch(items)))


def bench_scan(buf: bytearray, limit: int, n: int) -> tuple[int, int]:
    def python_scan() -> None:
        pos = 0
        while pos < limit:
            size, req = decode_for_dispatch(buf, pos, limit, None)
            assert req is not None  # whole messages up to limit (dispatch checks for None too)
            ENTRY.pack(req.commitlog_offset, size, req.tags_code)
            topic = req.topic
            key_hash(f"{topic}#{req.uniq_key}")
            for k in req.keys.split(" "):
                if k:
                    key_hash(f"{topic}#{k}")
            pos += size

    recs, keys = bytearray(nk.RECORD.size * n), bytearray(nk.KEY.size * 3 * n)

    def kernel() -> None:
        r = nk.dispatch_scan(buf, 0, limit, recs, keys, uniq_key_index=True)
        assert r.records == n and r.keys == 3 * n

    return best_ns(python_scan), best_ns(kernel)


def bench_gather(buf: bytearray, limit: int, n: int) -> tuple[int, int, int]:
    entries = bytearray()
    pos = 0
    while pos < limit:
        size, req = decode_for_dispatch(buf, pos, limit, None)
        assert req is not None  # whole messages up to limit
        entries += ENTRY.pack(req.commitlog_offset, size, req.tags_code)
        pos += size
    codes = frozenset({java_string_hash("TagA")})
    pulls = n // 32
    view = memoryview(buf)[:limit]

    def python_gather() -> None:
        for p in range(pulls):
            buffers = []
            for i in range(p * 32, p * 32 + 32):
                phy, size, code = ENTRY.unpack_from(entries, 20 * i)
                if code in codes:
                    buffers.append(view[phy : phy + size])
            b"".join(buffers)

    out = bytearray(1 << 20)
    limits = nk.GatherLimits(32, 32, 1 << 20, 32, 1 << 20, 0, 0, limit, 1 << 24)
    code_array = nk.tag_codes_array(codes)

    def kernel() -> None:
        for p in range(pulls):
            g = nk.gather(memoryview(entries)[p * 640 :], 32, [(0, view)], out, None, limits, code_array)
            bytes(out[: g.bytes])

    return best_ns(python_gather), best_ns(kernel), pulls * 32


def bench_get_message(msgs: list[MessageInner]) -> tuple[int, int, int]:
    """ns of reading the whole queue in pulls of 32 through each getter (same store, same pulls)."""
    root = tempfile.mkdtemp(prefix="tidemq-kernel-bench-")
    store = DefaultMessageStore(MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log_bytes=64 << 20))
    store.load()
    store.start()
    try:
        for i in range(0, len(msgs), 100):
            assert store.put_messages(msgs[i : i + 100]).ok
        while store.reput_service.behind() > 0:
            time.sleep(0.01)
        tag_filter = TagFilter.parse("TagA")
        end = store.get_max_offset_in_queue("BenchTopic", 0)

        def read_all(getter: MessageGetter) -> None:
            offset = 0
            while offset < end:
                r = getter.get_message("bench", "BenchTopic", 0, offset, 32, tag_filter)
                assert r.status is GetMessageStatus.FOUND
                offset = r.next_begin_offset
                r.release()

        reference = ReferenceGetter(store.config, store.commit_log, store.stats, store.find_consume_queue)
        return best_ns(lambda: read_all(reference)), best_ns(lambda: read_all(store.getter)), end
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--body", type=int, default=1024)
    args = ap.parse_args()
    n = args.messages
    msgs = make_messages(n, args.body)
    dest = bytearray(n * (args.body + 400) + 64)  # allocated and written once: pre-faulted
    dest[:] = bytes(len(dest))
    py_enc, k_enc, k_enc_pack = bench_encode(msgs, dest)
    limit = nk.encode_batch(
        dest, 0, len(dest), nk.pack_batch((m.body, m.properties_bytes, m.flag) for m in msgs), 0, bytearray(16 * n), n,
        topic=b"BenchTopic", queue_id=0, queue_offset=0, physical_offset=0, store_timestamp=1, store_host=HOST,
        born_timestamp=1, born_host=HOST,
    ).dest_pos  # fmt: skip
    py_scan, k_scan = bench_scan(dest, limit, n)
    py_g, k_g, gathered = bench_gather(dest, limit, n)
    py_get, k_get, entries = bench_get_message(msgs)
    rows = [
        ("encode (batch given)", py_enc / n, k_enc / n),
        ("encode (+ pack_batch)", py_enc / n, k_enc_pack / n),
        ("dispatch scan (UNIQ_KEY + 2 keys)", py_scan / n, k_scan / n),
        ("gather (32-entry pulls, half match)", py_g / gathered, k_g / gathered),
        ("get_message (store, 32 per pull, half match)", py_get / entries, k_get / entries),
    ]
    print(f"{n} messages of {args.body} B body; ns per message (entry for gather), best of {ROUNDS}")
    print(f"{'kernel':46} {'python':>10} {'native':>10} {'python/native':>14}")
    for name, p, k in rows:
        print(f"{name:46} {p:10.0f} {k:10.0f} {p / k:14.1f}")


if __name__ == "__main__":
    main()
