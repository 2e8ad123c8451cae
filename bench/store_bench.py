"""In-process store benchmark: puts, batched puts, dispatch, delivery, gets and SYNC_FLUSH group commit.

Every figure is printed beside a baseline measured in the same run on the same disk,
because the machines are shared and absolute numbers drift:
- raw write: the same encoded bytes written sequentially with os.write in 1 MiB chunks;
- raw copy: the same bytes copied message by message into a mapped file (the least a
  put must do);
- raw read: the same bytes sliced message by message out of a mapped file;
- raw fsync: one os.write + os.fdatasync per message, one thread (what SYNC_FLUSH would
  cost without group commit);
- put p50: the put's own latency, for the delivery figures (put called -> arrival notice,
  the moment a held pull of the queue is woken).

"put + dispatch" times the puts until dispatch has caught up with them. "dispatch CPU"
is the CPU time of dispatching a commitlog of 1 KiB messages with TAGS, a UNIQ_KEY and two
KEYS (consume-queue entries and index entries) in a store that was loaded, not started,
after as many messages were dispatched unmeasured (the files' first writes are not counted).

The batched rows put MessageInner batches (queues alternating, as the JSON produce may), the
checked-batch row puts RocketMQ-encoded batches to one queue each (the binary produce's path), and
the first-writes row compares a new file the allocation service prefaulted with one that was not.

Usage: python bench/store_bench.py [--quick] [--markdown FILE] [--no-prefault]
Messages are built before timing starts; a put's time includes validation, encoding,
the append and the stats, with the dispatch thread running beside it.
"""

from __future__ import annotations

import argparse
import functools
import mmap
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.raw_append import raw_append_rate
from bench.threaded_rate import calls_per_second
from store import DefaultMessageStore, FlushDiskType, GetMessageStatus, MessageStoreConfig, PutBatch, build_message
from store.codec.message import MessageInner
from store.codec.message_codec import encode_message
from store.logfile.mapped_file import MappedFile, offset_to_file_name
from store.native import pack_batch

TOPIC = "Bench"
QUEUES = 4
CHUNK_BYTES = 1 << 20
GROUP_SIZES: dict[int, float] = {}  # producer threads -> mean requests answered by one group commit
PREFAULT = [True]  # the stores' prefault_mapped_file_enable (--no-prefault turns it off)


class Row:
    def __init__(self, name: str, value: float, unit: str, baseline_name: str, baseline: float, target: str = "") -> None:
        self.name, self.value, self.unit = name, value, unit
        self.baseline_name, self.baseline, self.target = baseline_name, baseline, target

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else 0.0


def make_store(root: str, flush: FlushDiskType, file_bytes: int) -> DefaultMessageStore:
    cfg = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log_bytes=file_bytes,
        flush_disk_type=flush,
        max_transfer_count_on_message_in_memory=32,
        prefault_mapped_file_enable=PREFAULT[0],
    )
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    return store


def messages(count: int, size: int) -> list[MessageInner]:
    body = os.urandom(size)
    return [MessageInner(TOPIC, body, i % QUEUES) for i in range(count)]


def encoded(count: int, size: int) -> list[bytes]:
    body = os.urandom(size)
    return [encode_message(TOPIC.encode(), body, b"", i % QUEUES, i, i) for i in range(count)]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def raw_write_rate(root: str, images: list[bytes]) -> float:
    """Bytes/s of writing the images sequentially to a file in 1 MiB chunks (page cache, no fsync)."""
    data = b"".join(images)
    path = os.path.join(root, "raw-write")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        elapsed = timed(lambda: [os.write(fd, view[i : i + CHUNK_BYTES]) for i in range(0, len(data), CHUNK_BYTES)])
    finally:
        os.close(fd)
        os.unlink(path)
    return len(data) / elapsed


def raw_copy_rate(root: str, images: list[bytes]) -> float:
    """Messages/s of copying each image into a fresh mapped file, one slice assignment per message."""
    total = sum(len(i) for i in images)
    path = os.path.join(root, "raw-copy")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, total)
    mm = mmap.mmap(fd, total)

    def copy() -> None:
        pos = 0
        for image in images:
            n = len(image)
            mm[pos : pos + n] = image
            pos += n

    try:
        elapsed = timed(copy)
    finally:
        mm.close()
        os.close(fd)
        os.unlink(path)
    return len(images) / elapsed


def raw_read_rate(root: str, images: list[bytes]) -> float:
    """Messages/s of slicing each image out of a mapped file (memoryviews, like a get)."""
    data = b"".join(images)
    path = os.path.join(root, "raw-read")
    with open(path, "wb") as fh:
        fh.write(data)
    fd = os.open(path, os.O_RDONLY)
    mm = mmap.mmap(fd, len(data), prot=mmap.PROT_READ)
    view = memoryview(mm)
    sizes = [len(i) for i in images]

    def read() -> None:
        pos = 0
        out = []
        for n in sizes:
            out.append(view[pos : pos + n])
            pos += n
        for v in out:
            v.release()

    try:
        elapsed = timed(read)
    finally:
        view.release()
        mm.close()
        os.close(fd)
        os.unlink(path)
    return len(images) / elapsed


def raw_fsync_rate(root: str, image: bytes, seconds: float) -> float:
    return raw_append_rate(os.path.join(root, "raw-fsync"), image, seconds, sync=True)


def bench_puts(root: str, size: int, count: int, file_bytes: int, batch: int) -> float:
    d = tempfile.mkdtemp(dir=root)
    store = make_store(d, FlushDiskType.ASYNC_FLUSH, file_bytes)
    msgs = messages(count, size)
    try:
        if batch == 1:
            put = store.put_message
            elapsed = timed(lambda: [put(m) for m in msgs])
        else:
            put_many = store.put_messages
            elapsed = timed(lambda: [put_many(msgs[i : i + batch]) for i in range(0, count, batch)])
        assert store.commit_log.topic_queue_table[(TOPIC, 0)] == (count + QUEUES - 1) // QUEUES
        return count / elapsed
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def bench_put_dispatch(root: str, size: int, count: int, file_bytes: int, batch: int) -> float:
    """Messages/s of puts (`batch` per call), timed until dispatch has caught up with them."""
    d = tempfile.mkdtemp(dir=root)
    store = make_store(d, FlushDiskType.ASYNC_FLUSH, file_bytes)
    msgs = messages(count, size)
    try:

        def put_and_dispatch() -> None:
            for i in range(0, count, batch):
                store.put_messages(msgs[i : i + batch])
            while store.reput_service.behind() > 0:
                time.sleep(0.0002)

        return count / timed(put_and_dispatch)
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def bench_dispatch_cpu(root: str, size: int, count: int, file_bytes: int) -> float:
    """CPU seconds per message of dispatching messages with TAGS, a UNIQ_KEY and two KEYS.

    The target store first dispatches as many messages unmeasured: the files' first writes
    (a fault per page, an extent conversion per region) are not dispatch's cost per message.
    """
    d = tempfile.mkdtemp(dir=root)
    source = make_store(os.path.join(d, "source"), FlushDiskType.ASYNC_FLUSH, file_bytes)
    body = os.urandom(size)
    msgs = [
        build_message(TOPIC, body, i % QUEUES, tags="TagA" if i % 2 else "TagB", keys=[f"order-{i}", f"user-{i % 97}"])
        for i in range(2 * count)
    ]
    half = 0
    for i in range(0, 2 * count, 100):
        r = source.put_messages(msgs[i : i + 100])
        if i + 100 == count:
            half = r.end_offset
    data = source.get_commit_log_data(0, file_bytes)
    source.shutdown()
    cfg = MessageStoreConfig(store_path_root_dir=os.path.join(d, "target"), mapped_file_size_commit_log_bytes=file_bytes)
    target = DefaultMessageStore(cfg)  # loaded, not started: no thread dispatches but the one measured
    target.load()
    try:
        assert target.commit_log.append_data(0, data[:half])
        assert target.reput_service.do_reput() == count  # warm-up
        assert target.commit_log.append_data(half, data[half:])
        t0 = time.thread_time()
        dispatched = target.reput_service.do_reput()
        cpu = time.thread_time() - t0
        assert dispatched == count, dispatched
        return cpu / count
    finally:
        target.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def bench_delivery(root: str, size: int, count: int, file_bytes: int) -> tuple[float, float, float]:
    """(p50, p99) µs from a put's call to the arrival notice of its message, and the put's p50 µs; paced puts."""
    d = tempfile.mkdtemp(dir=root)
    store = make_store(d, FlushDiskType.ASYNC_FLUSH, file_bytes)
    arrived: dict[tuple[int, int], int] = {}
    ends = [0] * QUEUES

    def on_arrival(topic: str, queue_id: int, after: int, *_rest: object) -> None:
        now = time.perf_counter_ns()
        for offset in range(ends[queue_id], after):
            arrived[(queue_id, offset)] = now
        ends[queue_id] = max(ends[queue_id], after)

    store.add_message_arriving_listener(on_arrival)
    msgs = messages(count, size)
    called: dict[tuple[int, int], int] = {}
    put_us: list[float] = []
    try:
        for m in msgs:
            t0 = time.perf_counter_ns()
            r = store.put_message(m)
            put_us.append((time.perf_counter_ns() - t0) / 1000)
            called[(m.queue_id, r.items[0].logics_offset)] = t0
            time.sleep(0.0002)
        while store.reput_service.behind() > 0 or len(arrived) < count:
            time.sleep(0.001)
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)
    delivery = sorted((arrived[k] - t) / 1000 for k, t in called.items())
    return delivery[len(delivery) // 2], delivery[int(len(delivery) * 0.99)], sorted(put_us)[len(put_us) // 2]


def bench_native_batches(root: str, size: int, count: int, file_bytes: int, batch: int) -> float:
    """Messages/s of put of checked (ENCODED) batches (RocketMQ's encoding, one queue each, as
    the binary produce puts them), the checks included."""
    d = tempfile.mkdtemp(dir=root)
    store = make_store(d, FlushDiskType.ASYNC_FLUSH, file_bytes)
    body = os.urandom(size)
    data = pack_batch([(body, b"", 0)] * batch)
    try:

        def put_all() -> None:
            for i in range(count // batch):
                assert store.put(PutBatch.of_encoded(TOPIC, i % QUEUES, store.check_batch(data))).result().ok

        return count // batch * batch / timed(put_all)
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def _write_in_slices(mm: mmap.mmap, chunk: bytes) -> None:
    n = len(chunk)
    for pos in range(0, len(mm) - n + 1, n):
        mm[pos : pos + n] = chunk


def first_write_rates(root: str, file_bytes: int) -> tuple[float, float]:
    """Bytes/s of writing a new mapped file in 1 KiB slices (as puts do), prefaulted and not.

    The prefault itself is not timed: the allocation service does it off the put path.
    """
    chunk = os.urandom(1024)
    rates = []
    for i, prefault in enumerate((True, False)):
        mf = MappedFile(os.path.join(root, offset_to_file_name(i * file_bytes)), file_bytes)
        try:
            if prefault:
                mf.prefault(0, file_bytes)
            rates.append(file_bytes / timed(functools.partial(_write_in_slices, mf.mm, chunk)))
        finally:
            mf.destroy()
    return rates[0], rates[1]


def bench_gets(root: str, size: int, count: int, file_bytes: int) -> float:
    d = tempfile.mkdtemp(dir=root)
    store = make_store(d, FlushDiskType.ASYNC_FLUSH, file_bytes)
    try:
        msgs = messages(count, size)
        for i in range(0, count, 100):
            store.put_messages(msgs[i : i + 100])
        while store.reput_service.behind() > 0:
            time.sleep(0.01)

        def read_all() -> int:
            got = 0
            for qid in range(QUEUES):
                offset = 0
                while True:
                    r = store.get_message("bench", TOPIC, qid, offset, 32)
                    try:
                        if r.status is not GetMessageStatus.FOUND:
                            break
                        got += r.message_count
                        offset = r.next_begin_offset
                    finally:
                        r.release()
            assert got == count, got
            return got

        return count / timed(read_all)
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def bench_sync_flush(root: str, threads: int, seconds: float, file_bytes: int) -> float:
    d = tempfile.mkdtemp(dir=root)
    store = make_store(d, FlushDiskType.SYNC_FLUSH, file_bytes)
    body = os.urandom(1024)

    def put(n: int, _i: int) -> None:
        r = store.put_message(MessageInner(TOPIC, body, n % QUEUES))
        assert r.ok, r.status

    rate = calls_per_second(put, threads, seconds)
    service = store.flush_service
    GROUP_SIZES[threads] = getattr(service, "requests_served", 0) / max(1, getattr(service, "group_commits", 0))
    store.shutdown()
    shutil.rmtree(d, ignore_errors=True)
    return rate


def run(quick: bool) -> list[Row]:
    scale = 0.05 if quick else 1.0
    root = tempfile.mkdtemp(prefix="tidemq-bench-", dir=os.environ.get("TIDEMQ_BENCH_DIR"))
    file_bytes = (32 if quick else 256) * 1024 * 1024
    sync_seconds = 0.5 if quick else 3.0
    rows: list[Row] = []
    try:
        for size, count in ((128, 200_000), (1024, 100_000), (4096, 50_000)):
            n = max(1000, int(count * scale))
            images = encoded(n, size)
            avg = sum(len(i) for i in images) / n
            write_bps = raw_write_rate(root, images)
            copy_mps = raw_copy_rate(root, images)
            single = bench_puts(root, size, n, file_bytes, 1)
            target = ">= 250,000 msg/s" if size == 128 else ""
            rows.append(Row(f"put {size} B, single", single, "msg/s", "raw copy (msg/s)", copy_mps, target))
            if size == 128:
                both = bench_put_dispatch(root, size, n, file_bytes, 1)
                rows.append(Row(f"put + dispatch {size} B, single", both, "msg/s", "raw copy (msg/s)", copy_mps))
            batched = bench_puts(root, size, n, file_bytes, 100)
            rows.append(Row(f"put {size} B, batch of 100", batched, "msg/s", "raw copy (msg/s)", copy_mps))
            target = ">= 0.4 of raw write" if size == 1024 else ""
            rows.append(Row(f"put {size} B, batch of 100 (bytes)", batched * avg, "B/s", "raw write (B/s)", write_bps, target))
            if size == 1024:
                native = bench_native_batches(root, size, max(n, 20_000), file_bytes, 100)
                rows.append(Row(f"put {size} B, checked batch of 100 (bytes)", native * avg, "B/s", "raw write (B/s)", write_bps))
        prefaulted, faulting = first_write_rates(root, file_bytes)
        rows.append(Row("first writes into a new file, 1 KiB slices, prefaulted", prefaulted, "B/s", "not prefaulted (B/s)", faulting))
        n = max(2000, int(100_000 * scale))
        images = encoded(n, 1024)
        write_bps, avg = raw_write_rate(root, images), sum(len(i) for i in images) / n
        rate = bench_put_dispatch(root, 1024, n, file_bytes, 100)
        rows.append(Row("put + dispatch 1024 B, batch of 100 (bytes)", rate * avg, "B/s", "raw write (B/s)", write_bps))
        read_us = 1e6 / raw_read_rate(root, images)
        cpu_us = bench_dispatch_cpu(root, 1024, n, file_bytes) * 1e6
        rows.append(Row("dispatch CPU 1 KiB, TAGS + UNIQ_KEY + 2 keys", cpu_us, "µs/msg", "raw read (µs/msg)", read_us, "<= 0.5 µs"))
        p50, p99, put_p50 = bench_delivery(root, 1024, max(1000, int(20_000 * scale)), file_bytes)
        rows.append(Row("delivery 1 KiB, put called -> notice, p50", p50, "µs", "put p50 (µs)", put_p50))
        rows.append(Row("delivery 1 KiB, put called -> notice, p99", p99, "µs", "put p50 (µs)", put_p50))
        rows.append(
            Row("get 1 KiB, 32 per call", bench_gets(root, 1024, n, file_bytes), "msg/s", "raw read (msg/s)", raw_read_rate(root, images))
        )
        fsync_rate = raw_fsync_rate(root, images[0], sync_seconds)
        single_sync = bench_sync_flush(root, 1, sync_seconds, file_bytes)
        rows.append(Row("SYNC_FLUSH 1 KiB, 1 producer", single_sync, "msg/s", "raw write+fdatasync (msg/s)", fsync_rate))
        for threads in (16, 64):
            rate = bench_sync_flush(root, threads, sync_seconds, file_bytes)
            target = ">= 20x 1 producer" if threads == 64 else ""
            rows.append(Row(f"SYNC_FLUSH 1 KiB, {threads} producers", rate, "msg/s", "SYNC_FLUSH 1 producer", single_sync, target))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def render(rows: list[Row]) -> str:
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}",
        "",
        "| figure | value | unit | baseline | baseline value | ratio | target |",
        "|---|---:|---|---|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| {r.name} | {_num(r.value)} | {r.unit} | {r.baseline_name} | {_num(r.baseline)} | {r.ratio:.3f} | {r.target} |")
    if GROUP_SIZES:
        sizes = ", ".join(f"{n} producers: {size:.1f}" for n, size in sorted(GROUP_SIZES.items()))
        lines += ["", f"mean requests answered per group commit (one flush each): {sizes}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: checks the harness runs, figures mean little")
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--no-prefault", action="store_true", help="stores without prefault_mapped_file_enable")
    args = parser.parse_args()
    PREFAULT[0] = not args.no_prefault
    started = time.perf_counter()
    table = render(run(args.quick))
    print(table)
    print(f"\n(took {time.perf_counter() - started:.0f} s)")
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
