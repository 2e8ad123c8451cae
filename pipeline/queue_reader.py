"""Reading one queue's offset range [start, end) over HTTP into Arrow record batches.

The one read path of the batch and streaming sources: batch pulls (the stored bytes,
not JSON) from `start` until the next offset reaches `end`, each message decoded once by
`RowBatchBuilder`.

Invariants: pulls are made one after another (each starts at the previous one's next offset)
in one prefetch thread per partition, at most `prefetch_pulls` ahead of decoding; every row has start <= queue_offset < end, and offsets come out in
increasing order, each at most once. The loop ends: each pull either moves the offset
forward or raises (a pull that makes no progress is a broker fault, reported as such).
Messages gone before they were read raise `DataLost` unless the caller allows skipping;
a queue the stream discovered after it started (`tolerate_gap`) may begin above 0
without that counting as a loss.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from pipeline.errors import BrokerProblem, PipelineError
from pipeline.http_client import BrokerClient, ClientSettings
from pipeline.message_rows import RowBatchBuilder
from pipeline.offsets import raise_to_min
from pipeline.pull_prefetcher import PullPrefetcher
from store.layouts import POS_QUEUE_OFFSET, iter_messages, read_long

DEFAULT_PULL_MESSAGES = 1024  # messages asked per pull; the broker caps it at its max_pull_messages
DEFAULT_PREFETCH_PULLS = 2  # pulls buffered ahead of the decoder: enough to keep the broker busy, little memory
STATUS_FOUND = "FOUND"
STATUS_NO_MATCHED = "NO_MATCHED_MSG"
STATUS_OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
SKIP_STATUSES = frozenset({"OFFSET_FOUND_NULL", "MESSAGE_WAS_REMOVING"})  # a hole in the queue: continue at next_offset


@dataclass(frozen=True, slots=True)
class ReadSettings:
    client: ClientSettings
    topic: str
    tag: str | None = None  # tag filter, e.g. "TagA||TagB"; None reads every message
    pull_messages: int = DEFAULT_PULL_MESSAGES
    fail_on_data_loss: bool = True
    prefetch_pulls: int = DEFAULT_PREFETCH_PULLS  # pulls fetched ahead of decoding


class QueueRangePartition(InputPartition):
    """Offsets [start, end) of one queue."""

    def __init__(self, queue_id: int, start: int, end: int, tolerate_gap: bool = False) -> None:
        super().__init__((queue_id, start, end))
        self.queue_id = queue_id
        self.start = start
        self.end = end
        self.tolerate_gap = tolerate_gap


def split_range(queue_id: int, start: int, end: int, max_per_partition: int, tolerate_gap: bool = False) -> list[QueueRangePartition]:
    """[start, end) cut into partitions of at most `max_per_partition` offsets (none when empty)."""
    assert max_per_partition > 0
    out = []
    first = start
    while first < end:
        last = min(end, first + max_per_partition)
        out.append(QueueRangePartition(queue_id, first, last, tolerate_gap and first == start))
        first = last
    return out


def iter_pulls(client: BrokerClient, settings: ReadSettings, part: QueueRangePartition) -> Iterator[bytes]:
    """The stored bytes of each pull that found messages, in offset order, until the range's end."""
    offset = part.start
    pull_max = settings.pull_messages
    while offset < part.end:
        try:
            batch = client.pull(settings.topic, part.queue_id, offset, min(pull_max, part.end - offset), settings.tag)
        except BrokerProblem as e:
            if e.code != "MAX_INVALID" or pull_max == 1:
                raise
            pull_max //= 2  # the broker caps max lower than asked: halve (at most log2(pull_messages) times)
            continue
        status = batch.status
        if status == STATUS_FOUND:
            yield batch.data
        elif status == STATUS_OFFSET_TOO_SMALL:
            if not (part.tolerate_gap and offset == part.start):
                raise_to_min(settings.topic, part.queue_id, offset, batch.next_offset, settings.fail_on_data_loss)
        elif status in SKIP_STATUSES:
            raise_to_min(settings.topic, part.queue_id, offset, batch.next_offset, settings.fail_on_data_loss)
        elif status != STATUS_NO_MATCHED:
            raise PipelineError(
                f"topic {settings.topic!r} queue {part.queue_id}: pull at {offset} answered {status} "
                f"(queue holds {batch.min_offset}..{batch.max_offset}) before the planned end {part.end}"
            )
        if batch.next_offset <= offset:
            raise BrokerProblem(200, "NO_PROGRESS", f"pull at offset {offset} answered next offset {batch.next_offset}", "GET")
        offset = batch.next_offset


def read_partition(settings: ReadSettings, part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the partition's messages, in offset order.

    The pulls run ahead in a `PullPrefetcher` thread, so the broker serves the next pull
    while this thread decodes the last. Spark hands a plain InputPartition(None) when
    `partitions()` returned none: nothing to read.
    """
    if not isinstance(part, QueueRangePartition):
        return
    builder = RowBatchBuilder()
    check_end = settings.tag is not None  # a filtered pull may return matches past `end`
    with BrokerClient(settings.client) as client:
        pulls = PullPrefetcher(iter_pulls(client, settings, part), settings.prefetch_pulls, f"tidemq-pull-q{part.queue_id}-{part.start}")
        for data in pulls.results():
            for pos, _size in iter_messages(data):
                if check_end and read_long(data, pos + POS_QUEUE_OFFSET) >= part.end:
                    break
                builder.add(data, pos)
                if builder.full:
                    batch = builder.flush()
                    assert batch is not None, "a full builder has rows"
                    yield batch
    last = builder.flush()
    if last is not None:
        yield last
