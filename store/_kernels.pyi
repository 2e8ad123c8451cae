# Signatures of the C extension store._kernels (store/_native/); store.native wraps each one.
from collections.abc import Callable
from typing import Any, Literal, overload

from store.errors import StoreError

GIL_RELEASE_MIN_BYTES: int  # kernels keep the GIL for smaller inputs
ASSERTIONS: int  # 1 when the kernels' assert() calls are compiled in (the ASan build), 0 in the normal build

class BatchError(StoreError):
    index: int

def gil_releases() -> int: ...
def crc32(data: Any, value: int = ..., portable: bool = ..., /) -> int: ...
def crc32_method() -> int: ...
def java_hash(text: Any, prefix: int = ...) -> int: ...
def check_message(buf: Any, pos: int, limit: int, check_crc: bool) -> tuple[int, int]: ...
@overload
def check_batch(
    batch: Any, max_body_bytes: int, max_count: int = ..., max_properties_bytes: int = ..., check_properties: bool = ..., /
) -> tuple[int, int]: ...
@overload
def check_batch(
    batch: Any, max_body_bytes: int, max_count: int, max_properties_bytes: int, check_properties: bool, with_crcs: Literal[True], /
) -> tuple[int, int, bytes, bool]: ...
def prefault(buf: Any, pos: int, length: int, /) -> int: ...
def render_views(data: Any, /) -> bytes | None: ...
def json_produce(
    body: Any, max_messages: int, max_body: int, reserved: bytes, reserve: Callable[[int], tuple[bytes, int]], /
) -> tuple[bytes, int, int, bool, tuple[bytes, int]] | None: ...
def raw_item(body: bytes, properties: bytes, head: bytes, first: int, /) -> bytes: ...
def render_produce_reply(
    head: bytes,
    first: int,
    host_hex: bytes,
    queue_id: int,
    first_queue_offset: int,
    store_timestamp: int,
    offsets: bytes,
    is_batch: bool,
    /,
) -> bytes: ...
def render_received(message: Any, topic: bytes, reconsume_times: int, handle: bytes, invisible_until_ms: int, /) -> bytes | None: ...
def put_packed(
    log: Any,
    batch: Any,
    topic: str,
    topic_bytes: bytes,
    queue_id: int,
    born_host: bytes,
    max_body: int,
    max_count: int,
    max_props: int,
    /,
) -> tuple[bytes, int, int, int, int, int] | None: ...
def encode_batch(
    dest: Any,
    dest_pos: int,
    dest_limit: int,
    batch: Any,
    batch_pos: int,
    out: Any,
    max_count: int,
    topic: bytes,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    queue_offset: int,
    physical_offset: int,
    crcs: Any = ...,
    /,
) -> tuple[int, int, int, int]: ...
def dispatch_scan(
    buf: Any, pos: int, limit: int, records: Any, keys: Any, flags: int, delay_levels: bytes | None, /
) -> tuple[int, int, int, int]: ...
def queue_runs(
    buf: Any, records: Any, n_records: int, record_from: int, runs: Any, entries: Any, scratch: Any, /
) -> tuple[int, int, int, int]: ...
def index_put(
    file: Any,
    slot_num: int,
    index_num: int,
    header: tuple[int, int, int, int, int, int],
    keys: Any,
    key_from: int,
    key_to: int,
    current_record: int,
    /,
) -> tuple[int, int, int, int, tuple[int, int, int, int, int, int]]: ...
def gather(
    entries: Any,
    n: int,
    segments: Any,
    out: Any,
    meta: Any,
    limits: tuple[int, ...],
    codes: bytes | None,
    tags: tuple[bytes, ...] | None,
    ranges: bytes | None = ...,
    state: tuple[int, ...] | None = ...,
    sql: bytes | None = ...,
    /,
) -> tuple[int, int, int, int, int, int]: ...

MADV_DONTNEED: int
MADV_WILLNEED: int

SERVE_IDLE: int
SERVE_WINDOW: int
SERVE_BUDGET: int
SERVE_CALLED: int
SERVE_FAILED: int
SERVE_CLOSED: int

class GroupFlush:
    """The group commit's requests, flushed offset and flushes without the GIL (store/_native/group_flush.c)."""

    requested: int
    flushed: int
    failures: int
    asks: int
    flushes: int
    last_errno: int
    closed: bool
    waiters: int
    serving: bool
    led: int
    lending: bool
    lone: bool
    def __init__(self) -> None: ...
    def ask(self, offset: int, python: bool = False, /) -> None: ...
    def serve(
        self, mapping: Mapping | None, file_from: int, dropped_to: int, unmap_first: bool, max_flushes: int, idle_s: float, /
    ) -> tuple[int, int]: ...
    def wait(self, offset: int, timeout_s: float, lead_to: int = 0, /) -> int: ...
    def advance(self, offset: int, /) -> None: ...
    def reset(self, offset: int, /) -> None: ...
    def fail(self) -> None: ...
    def inject_failure(self, errno: int, /) -> None: ...
    def call(self) -> None: ...
    def close(self) -> None: ...

class Mapping:
    """A shared read-write mapping of a file that holds no descriptor (store/_native/mapping.c)."""

    def __init__(self, fd: int, length: int) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, view: memoryview, /) -> None: ...
    @overload
    def __getitem__(self, key: int, /) -> int: ...
    @overload
    def __getitem__(self, key: slice, /) -> bytes: ...
    @overload
    def __setitem__(self, key: int, value: int, /) -> None: ...
    @overload
    def __setitem__(self, key: slice, value: Any, /) -> None: ...
    def close(self) -> None: ...
    def flush(self, offset: int = ..., size: int = ..., /) -> None: ...
    def madvise(self, advice: int, start: int = ..., length: int = ..., /) -> None: ...
    def find(self, sub: Any, start: int = ..., end: int = ..., /) -> int: ...
    @property
    def address(self) -> int: ...
    @property
    def closed(self) -> bool: ...

def punch_hole(fd: int, offset: int, length: int, /) -> None: ...
def sql_eval(program: Any, properties: Any, /) -> int: ...
def encode_properties(properties: Any, /) -> bytes | None: ...
def decode_properties(data: Any, /) -> dict[str, str]: ...
