"""In-process store benchmark: puts, batched puts, dispatch, delivery, gets and SYNC_FLUSH group commit.

Every figure is printed with its CPU per message (the process's CPU, all threads, around the
measurement) and the 1-minute load average, beside a baseline measured in the same run on the
same disk, because the machines are shared and absolute numbers drift; the ratio a target is
judged by is the ratio of CPU per message. Baselines:
- raw write: the same encoded bytes written sequentially with os.write in 1 MiB chunks;
- raw copy: the same bytes copied message by message (one memcpy each, in C: bench/baseline_copy.c,
  one call for all of them) into a mapped file whose pages were faulted in first (the least a
  put must do: the store prefaults its files too);
- raw read: the same bytes copied message by message out of a mapped file whose pages were read
  first, into a prefaulted buffer (the least a get that copies out must do);
- raw fsync: one os.write + os.fdatasync per message, one thread (what SYNC_FLUSH would
  cost without group commit); its CPU per call is the baseline of the group commit thread's own CPU
  per flush (its thread CPU clock; many producers), and of what SYNC_FLUSH adds to one producer's put
  over ASYNC_FLUSH, all threads counted (getrusage): in all, and in system CPU, the flush itself (that
  producer's wait makes its flush on its own thread: GroupFlush's leading wait, docs/native.md);
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
import ctypes
import functools
import mmap
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.load_generator import CopyBaseline
from bench.raw_append import raw_append, raw_append_system
from bench.threaded_rate import calls_per_second
from store import DefaultMessageStore, FlushDiskType, GetMessageStatus, MessageStoreConfig, PutBatch, build_message
from store._kernels import Mapping
from store.codec.message import MessageInner
from store.codec.message_codec import encode_message
from store.logfile.mapped_file import MappedFile, offset_to_file_name
from store.native import pack_batch

TOPIC = "Bench"
QUEUES = 4
CHUNK_BYTES = 1 << 20
GROUP_SIZES: dict[int, float] = {}  # producer threads -> mean requests answered by one group commit
FLUSH_CPU_US: dict[int, float] = {}  # producer threads -> CPU microseconds of the group commit thread per flush
CPU_US: list[float] = [0.0]  # CPU microseconds per message of the last measurement (`timed` sets it)
PREFAULT = [True]  # the stores' prefault_mapped_file_enable (--no-prefault turns it off)
LOAD_AT_START = [0.0]  # the 1-minute load average when the run began


class Row:
    """One figure beside its baseline: rate (or time) and CPU per message of each, and the load average then."""

    def __init__(
        self, name: str, value: float, unit: str, baseline_name: str, baseline: float, target: str = "",
        cpu_us: float = float("nan"), baseline_cpu_us: float = float("nan"),
    ) -> None:  # fmt: skip
        self.name, self.value, self.unit = name, value, unit
        self.baseline_name, self.baseline, self.target = baseline_name, baseline, target
        self.cpu_us, self.baseline_cpu_us = cpu_us, baseline_cpu_us
        self.load = os.getloadavg()[0]

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else 0.0

    @property
    def cpu_ratio(self) -> float:
        """CPU per message of the figure over the baseline's (nan when either is not measured)."""
        return self.cpu_us / self.baseline_cpu_us if self.baseline_cpu_us else float("nan")


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


def timed(fn: Callable[[], object], count: int = 1) -> float:
    """Seconds `fn` took; CPU_US[0] becomes the process's CPU microseconds per one of `count` messages meanwhile."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    elapsed = time.perf_counter() - t0
    CPU_US[0] = (time.process_time() - c0) / max(1, count) * 1e6
    return elapsed


def raw_write_rate(root: str, images: list[bytes]) -> float:
    """Bytes/s of writing the images sequentially to a file in 1 MiB chunks (page cache, no fsync)."""
    data = b"".join(images)
    path = os.path.join(root, "raw-write")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        elapsed = timed(lambda: [os.write(fd, view[i : i + CHUNK_BYTES]) for i in range(0, len(data), CHUNK_BYTES)], len(images))
    finally:
        os.close(fd)
        os.unlink(path)
    return len(data) / elapsed


def _sizes(images: list[bytes]) -> ctypes.Array[ctypes.c_uint32]:
    return (ctypes.c_uint32 * len(images))(*(len(i) for i in images))


def _address(buffer: mmap.mmap | bytearray) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def raw_copy_rate(root: str, images: list[bytes]) -> float:
    """Messages/s of copying each image (one memcpy each, one C call for all) into a mapped file
    whose pages were written once before (prefaulted, as the store's files are)."""
    total = sum(len(i) for i in images)
    path = os.path.join(root, "raw-copy")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, total)
    mm = mmap.mmap(fd, total)
    source = bytearray(b"".join(images))
    sizes = _sizes(images)
    copier = CopyBaseline()
    try:
        mm[:] = bytes(total)  # every page faulted in and dirtied before the timed copy
        dst, src = _address(mm), _address(source)
        elapsed = timed(lambda: copier.copy(dst, src, sizes), len(images))
    finally:
        mm.close()
        os.close(fd)
        os.unlink(path)
    return len(images) / elapsed


def raw_read_rate(root: str, images: list[bytes]) -> float:
    """Messages/s of copying each image out of a mapped file (one memcpy each, one C call for all) into
    a buffer; the file's pages were read and the buffer's written before (no page faults timed)."""
    data = b"".join(images)
    path = os.path.join(root, "raw-read")
    with open(path, "wb") as fh:
        fh.write(data)
    fd = os.open(path, os.O_RDWR)
    mm = mmap.mmap(fd, len(data))
    target = bytearray(len(data))
    sizes = _sizes(images)
    copier = CopyBaseline()
    try:
        assert bytes(mm[:]) == data  # every page of the map read in
        src, dst = _address(mm), _address(target)
        elapsed = timed(lambda: copier.copy(dst, src, sizes), len(images))
    finally:
        mm.close()
        os.close(fd)
        os.unlink(path)
    return len(images) / elapsed


def raw_fsync_rate(root: str, image: bytes, seconds: float) -> float:
    """write + fdatasync calls per second of one thread; CPU_US[0] becomes that thread's CPU per call."""
    rate, CPU_US[0] = raw_append(os.path.join(root, "raw-fsync"), image, seconds, sync=True)
    return rate


def bench_puts(root: str, size: int, count: int, file_bytes: int, batch: int) -> float:
    d = tempfile.mkdtemp(dir=root)
    store = make_store(d, FlushDiskType.ASYNC_FLUSH, file_bytes)
    msgs = messages(count, size)
    try:
        if batch == 1:
            put = store.put_message
            elapsed = timed(lambda: [put(m) for m in msgs], count)
        else:
            put_many = store.put_messages
            elapsed = timed(lambda: [put_many(msgs[i : i + batch]) for i in range(0, count, batch)], count)
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

        return count / timed(put_and_dispatch, count)
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

        return count // batch * batch / timed(put_all, count // batch * batch)
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def _write_in_slices(mm: Mapping, chunk: bytes) -> None:
    n = len(chunk)
    for pos in range(0, len(mm) - n + 1, n):
        mm[pos : pos + n] = chunk


def first_write_rates(root: str, file_bytes: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(bytes/s, CPU µs per 1 KiB slice) of writing a new mapped file in 1 KiB slices (as puts do), prefaulted and not.

    The prefault itself is not timed: the allocation service does it off the put path.
    """
    chunk = os.urandom(1024)
    rates = []
    for i, prefault in enumerate((True, False)):
        mf = MappedFile(os.path.join(root, offset_to_file_name(i * file_bytes)), file_bytes)
        try:
            mf.ensure_reserved(file_bytes)  # both files' blocks reserved: only the page faults differ
            if prefault:
                mf.prefault(0, file_bytes)
            rate = file_bytes / timed(functools.partial(_write_in_slices, mf.mm, chunk), file_bytes // len(chunk))
            rates.append((rate, CPU_US[0]))
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

        return count / timed(read_all, count)
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def bench_sync_flush(root: str, threads: int, seconds: float, file_bytes: int) -> float:
    """SYNC_FLUSH puts per second of `threads` threads; CPU_US[0] becomes the process's CPU per put, and
    FLUSH_CPU_US[threads] the group commit thread's own CPU per flush (its thread CPU clock)."""
    d = tempfile.mkdtemp(dir=root)
    store = make_store(d, FlushDiskType.SYNC_FLUSH, file_bytes)
    body = os.urandom(1024)

    def put(n: int, _i: int) -> None:
        r = store.put_message(MessageInner(TOPIC, body, n % QUEUES))
        assert r.ok, r.status

    service = store.flush_service
    commit_thread = getattr(service, "_thread", None)
    clock = time.pthread_getcpuclockid(commit_thread.ident) if commit_thread is not None and commit_thread.ident else None
    flushes = getattr(service, "group_commits", 0)
    thread_cpu = time.clock_gettime(clock) if clock is not None else 0.0
    cpu = time.process_time()
    rate = calls_per_second(put, threads, seconds)
    CPU_US[0] = (time.process_time() - cpu) / max(1.0, rate * seconds) * 1e6
    flushes = getattr(service, "group_commits", 0) - flushes
    if clock is not None and flushes:
        FLUSH_CPU_US[threads] = (time.clock_gettime(clock) - thread_cpu) / flushes * 1e6
    GROUP_SIZES[threads] = getattr(service, "requests_served", 0) / max(1, getattr(service, "group_commits", 0))
    store.shutdown()
    shutil.rmtree(d, ignore_errors=True)
    return rate


def bench_durable_cost(root: str, seconds: float, file_bytes: int) -> tuple[float, float]:
    """What SYNC_FLUSH adds to a put of one producer, all threads counted: (CPU µs, of which system CPU µs) per
    put over the same puts under ASYNC_FLUSH, one run of each (getrusage of the process)."""
    per_put: list[tuple[float, float]] = []
    body = os.urandom(1024)
    for kind in (FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH):
        d = tempfile.mkdtemp(dir=root)
        store = make_store(d, kind, file_bytes)
        try:
            count, deadline = 0, time.perf_counter() + seconds
            used = resource.getrusage(resource.RUSAGE_SELF)
            while time.perf_counter() < deadline:
                r = store.put_message(MessageInner(TOPIC, body, count % QUEUES))
                assert r.ok, r.status
                count += 1
            done = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            store.shutdown()
            shutil.rmtree(d, ignore_errors=True)
        system = done.ru_stime - used.ru_stime
        per_put.append(((system + done.ru_utime - used.ru_utime) / count * 1e6, system / count * 1e6))
    (async_cpu, async_sys), (sync_cpu, sync_sys) = per_put
    return sync_cpu - async_cpu, sync_sys - async_sys


def with_cpu(value: float) -> tuple[float, float]:
    """(value, CPU microseconds per message of the measurement that produced it)."""
    return value, CPU_US[0]


def run(quick: bool) -> list[Row]:
    scale = 0.05 if quick else 1.0
    root = tempfile.mkdtemp(prefix="tidemq-bench-", dir=os.environ.get("TIDEMQ_BENCH_DIR"))
    file_bytes = (32 if quick else 256) * 1024 * 1024
    sync_seconds = 1.0 if quick else 3.0
    rows: list[Row] = []
    try:
        for size, count in ((128, 200_000), (1024, 100_000), (4096, 50_000)):
            n = max(1000, int(count * scale))
            images = encoded(n, size)
            avg = sum(len(i) for i in images) / n
            write_bps, write_cpu = with_cpu(raw_write_rate(root, images))
            copy_mps, copy_cpu = with_cpu(raw_copy_rate(root, images))
            single, cpu = with_cpu(bench_puts(root, size, n, file_bytes, 1))
            target = ">= 250,000 msg/s" if size == 128 else ""
            rows.append(Row(f"put {size} B, single", single, "msg/s", "raw copy (msg/s)", copy_mps, target, cpu, copy_cpu))
            if size == 128:
                both, cpu = with_cpu(bench_put_dispatch(root, size, n, file_bytes, 1))
                rows.append(Row(f"put + dispatch {size} B, single", both, "msg/s", "raw copy (msg/s)", copy_mps, "", cpu, copy_cpu))
            batched, cpu = with_cpu(bench_puts(root, size, n, file_bytes, 100))
            rows.append(Row(f"put {size} B, batch of 100", batched, "msg/s", "raw copy (msg/s)", copy_mps, "", cpu, copy_cpu))
            target = ">= 0.4 of raw write" if size == 1024 else ""
            rows.append(
                Row(f"put {size} B, batch of 100 (bytes)", batched * avg, "B/s", "raw write (B/s)", write_bps, target, cpu, write_cpu)
            )
            if size == 1024:
                native, cpu = with_cpu(bench_native_batches(root, size, max(n, 20_000), file_bytes, 100))
                name = f"put {size} B, checked batch of 100 (bytes)"
                rows.append(Row(name, native * avg, "B/s", "raw write (B/s)", write_bps, "", cpu, write_cpu))
        (prefaulted, cpu), (faulting, faulting_cpu) = first_write_rates(root, file_bytes)
        rows.append(Row("first writes into a new file, 1 KiB slices, prefaulted", prefaulted, "B/s", "not prefaulted (B/s)", faulting, "",
                        cpu, faulting_cpu))  # fmt: skip
        n = max(2000, int(100_000 * scale))
        images = encoded(n, 1024)
        write_bps, write_cpu = with_cpu(raw_write_rate(root, images))
        avg = sum(len(i) for i in images) / n
        rate, cpu = with_cpu(bench_put_dispatch(root, 1024, n, file_bytes, 100))
        rows.append(Row("put + dispatch 1024 B, batch of 100 (bytes)", rate * avg, "B/s", "raw write (B/s)", write_bps, "", cpu, write_cpu))
        read_mps, read_cpu = with_cpu(raw_read_rate(root, images))
        cpu_us = bench_dispatch_cpu(root, 1024, n, file_bytes) * 1e6
        rows.append(Row("dispatch CPU 1 KiB, TAGS + UNIQ_KEY + 2 keys", cpu_us, "µs/msg", "raw read (µs/msg)", 1e6 / read_mps, "<= 0.5 µs",
                        cpu_us, read_cpu))  # fmt: skip
        p50, p99, put_p50 = bench_delivery(root, 1024, max(1000, int(20_000 * scale)), file_bytes)
        rows.append(Row("delivery 1 KiB, put called -> notice, p50", p50, "µs", "put p50 (µs)", put_p50))
        rows.append(Row("delivery 1 KiB, put called -> notice, p99", p99, "µs", "put p50 (µs)", put_p50))
        gets, cpu = with_cpu(bench_gets(root, 1024, n, file_bytes))
        rows.append(Row("get 1 KiB, 32 per call", gets, "msg/s", "raw read (msg/s)", read_mps, "", cpu, read_cpu))
        fsync_rate, fsync_cpu = with_cpu(raw_fsync_rate(root, images[0], sync_seconds))
        single_sync, single_cpu = with_cpu(bench_sync_flush(root, 1, sync_seconds, file_bytes))
        rows.append(Row("SYNC_FLUSH 1 KiB, 1 producer", single_sync, "msg/s", "raw write+fdatasync (msg/s)", fsync_rate, "",
                        single_cpu, fsync_cpu))  # fmt: skip
        for threads in (16, 64):
            rate, cpu = with_cpu(bench_sync_flush(root, threads, sync_seconds, file_bytes))
            target = ">= 20x 1 producer" if threads == 64 else ""
            rows.append(Row(f"SYNC_FLUSH 1 KiB, {threads} producers", rate, "msg/s", "SYNC_FLUSH 1 producer", single_sync, target,
                            cpu, single_cpu))  # fmt: skip
        for threads, flush_cpu in sorted(FLUSH_CPU_US.items()):
            if threads > 1:  # one producer's wait makes its flush itself (GroupFlush's leading wait): the rows below
                rows.append(Row(f"group commit thread CPU per flush, {threads} producers", flush_cpu, "µs", "raw write+fdatasync CPU (µs)",
                                fsync_cpu, "", flush_cpu, fsync_cpu))  # fmt: skip
        _, raw_cpu, raw_sys = raw_append_system(os.path.join(root, "raw-split"), images[0], sync_seconds)
        added, added_sys = bench_durable_cost(root, sync_seconds, file_bytes)
        rows.append(Row("SYNC_FLUSH 1 producer: CPU a put adds over ASYNC_FLUSH (all threads)", added, "µs", "raw write+fdatasync CPU (µs)",
                        raw_cpu, "", added, raw_cpu))  # fmt: skip
        rows.append(Row("SYNC_FLUSH 1 producer: system CPU a put adds (the flush)", added_sys, "µs", "raw write+fdatasync system CPU (µs)",
                        raw_sys, "<= 1.2x raw", added_sys, raw_sys))  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def render(rows: list[Row]) -> str:
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load at the start "
        f"{LOAD_AT_START[0]:.1f}, at the end {os.getloadavg()[0]:.1f}",
        "CPU µs/msg: the process's CPU (every thread) per message during the figure's measurement; CPU ratio: the figure's "
        "over its baseline's, the ratio targets are judged by",
        "",
        "| figure | value | unit | CPU µs/msg | baseline | baseline value | baseline CPU µs/msg | ratio | CPU ratio | load | target |",
        "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {_num(r.value)} | {r.unit} | {r.cpu_us:.3g} | {r.baseline_name} | {_num(r.baseline)} | {r.baseline_cpu_us:.3g} "
            f"| {r.ratio:.3f} | {r.cpu_ratio:.3f} | {r.load:.1f} | {r.target} |"
        )
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
    LOAD_AT_START[0] = os.getloadavg()[0]
    started = time.perf_counter()
    table = render(run(args.quick))
    print(table)
    print(f"\n(took {time.perf_counter() - started:.0f} s)")
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
