"""Where a read starts and ends in each queue: parsing, validation and resolution.

An offset option is `earliest`, `latest`, or a JSON object of queue id -> offset such as
`{"0": 120, "1": 7}`, where an offset may also be -2 (earliest) or -1 (latest). Queues
a JSON object leaves out take the option's default (earliest for a start, latest for an
end). Spark hands streaming offsets back and forth as JSON too, so they always have string
keys and int values (`to_json_offsets` / `from_json_offsets`).

Invariants: a resolved range satisfies min_offset <= start <= end <= max_offset for every
queue of the topic, unless the caller accepted data loss, in which case a start below the
queue's min offset is raised to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.errors import DataLost, OptionInvalid

EARLIEST = -2  # in a JSON offset object: the queue's min offset
LATEST = -1  # in a JSON offset object: the queue's max offset (the next offset to be written)


@dataclass(frozen=True, slots=True)
class QueueRange:
    """The offsets a queue holds now: [min_offset, max_offset)."""

    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A parsed offset option: one position for every queue, or one per queue."""

    option: str
    default: int  # EARLIEST or LATEST: for every queue, or for the queues `per_queue` leaves out
    per_queue: dict[int, int] = field(default_factory=dict)


def parse_offset_spec(option: str, text: str | None, default: int) -> OffsetSpec:
    """Parse `earliest`, `latest` or a JSON object; OptionInvalid when malformed."""
    assert default in (EARLIEST, LATEST)
    if text is None:
        return OffsetSpec(option, default)
    word = text.strip()
    if word.lower() == "earliest":
        return OffsetSpec(option, EARLIEST)
    if word.lower() == "latest":
        return OffsetSpec(option, LATEST)
    try:
        parsed = orjson.loads(word)
    except orjson.JSONDecodeError:
        raise OptionInvalid(option, f'must be earliest, latest or a JSON object like {{"0": 120}}, not {text!r}') from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionInvalid(option, 'a JSON offset must be a non-empty object of queue id to offset, like {"0": 120}')
    return OffsetSpec(option, default, _queue_offsets(option, parsed))


def _queue_offsets(option: str, parsed: dict[Any, Any]) -> dict[int, int]:
    out: dict[int, int] = {}
    for key, value in parsed.items():
        if not isinstance(key, str) or not key.isdigit():
            raise OptionInvalid(option, f"queue id {key!r} is not a non-negative integer")
        if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST:
            raise OptionInvalid(option, f"offset of queue {key} must be an integer >= 0, or -2 (earliest) or -1 (latest), not {value!r}")
        out[int(key)] = value
    return out


def resolve_one(spec: OffsetSpec, queue_id: int, queue: QueueRange) -> int:
    """The absolute offset `spec` names for one queue (before range checks)."""
    value = spec.per_queue.get(queue_id, spec.default)
    if value == EARLIEST:
        return queue.min_offset
    if value == LATEST:
        return queue.max_offset
    return value


def check_queue_ids(spec: OffsetSpec, topic: str, queues: dict[int, QueueRange]) -> None:
    unknown = sorted(set(spec.per_queue) - set(queues))
    if unknown:
        raise OptionInvalid(spec.option, f"queue(s) {unknown} are not queues of topic {topic!r} (queues {sorted(queues)})")


def resolve_ranges(
    topic: str,
    queues: dict[int, QueueRange],
    start: OffsetSpec,
    end: OffsetSpec,
    fail_on_data_loss: bool = True,
) -> dict[int, tuple[int, int]]:
    """queue id -> (start, end) for a batch read; OptionInvalid or DataLost when impossible."""
    check_queue_ids(start, topic, queues)
    check_queue_ids(end, topic, queues)
    out: dict[int, tuple[int, int]] = {}
    for qid, queue in sorted(queues.items()):
        first = resolve_one(start, qid, queue)
        last = resolve_one(end, qid, queue)
        for spec, value in ((start, first), (end, last)):
            if value > queue.max_offset:
                raise OptionInvalid(spec.option, f"offset {value} of queue {qid} is past the queue's max offset {queue.max_offset}")
        if first < queue.min_offset:
            first = raise_to_min(topic, qid, first, queue.min_offset, fail_on_data_loss)
        if last < first:
            raise OptionInvalid(end.option, f"offset {last} of queue {qid} is before the starting offset {first}")
        out[qid] = (first, last)
    return out


def raise_to_min(topic: str, queue_id: int, offset: int, min_offset: int, fail_on_data_loss: bool) -> int:
    """`min_offset` for a start below it, or DataLost when the caller must not skip messages."""
    if fail_on_data_loss:
        raise DataLost(
            f"topic {topic!r} queue {queue_id}: offsets {offset}..{min_offset - 1} are no longer stored "
            f"(the queue starts at {min_offset}); set failOnDataLoss=false to skip them"
        )
    return min_offset


def to_json_offsets(offsets: dict[int, int]) -> dict[str, int]:
    return {str(qid): offset for qid, offset in sorted(offsets.items())}


def from_json_offsets(offsets: dict[str, Any]) -> dict[int, int]:
    """Offsets as Spark hands them back (string keys); a malformed checkpoint is a clear error."""
    try:
        return {int(qid): int(offset) for qid, offset in offsets.items()}
    except (TypeError, ValueError, AttributeError):
        raise OptionInvalid("offsets", f"checkpointed offsets {offsets!r} are not an object of queue id to offset") from None


def dumps(offsets: dict[int, int]) -> str:
    return orjson.dumps(to_json_offsets(offsets)).decode()


def allot_rows(start: dict[int, int], available_end: dict[int, int], max_rows: int) -> dict[int, int]:
    """End offsets that take at most `max_rows` messages in all, shared fairly among the queues.

    Water-filling over the queues in order of how much they have to read (then by id): each
    takes all it has or an even share of what is still unallotted, whichever is less. The
    last queue has the most to read, so it takes whatever is left: exactly `max_rows` are
    allotted whenever more than that are available, and never none.
    """
    assert max_rows >= 1
    avail = {qid: max(0, available_end[qid] - start.get(qid, 0)) for qid in available_end}
    if sum(avail.values()) <= max_rows:
        return dict(available_end)
    take: dict[int, int] = {}
    remaining = max_rows
    order = sorted(avail, key=lambda q: (avail[q], q))
    for i, qid in enumerate(order):
        take[qid] = min(avail[qid], remaining // (len(order) - i))
        remaining -= take[qid]
    assert remaining == 0
    return {qid: start.get(qid, 0) + take[qid] for qid in available_end}
