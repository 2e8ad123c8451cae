"""The put lane's admission (PutValidator.admits_plain) gives check_state's verdict: every state that makes a put
answer a refusal keeps a packed put off the lane, and only those (the lane's conditions are written out for speed)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from store import DefaultMessageStore, PackedProduce, PutMessageStatus, packed_raw
from store.codec.message import DEFAULT_BORN_HOST, MessageInner
from store.put_validation import PutValidator

# Each: what the refusing state is, how to enter it on a running store, how to leave it.
Toggle = tuple[str, Callable[[DefaultMessageStore, PutValidator], None], Callable[[DefaultMessageStore, PutValidator], None]]


def _set(name: str, value: object, normal: object, on: str = "store") -> Toggle:
    def enter(store: DefaultMessageStore, validator: PutValidator) -> None:
        setattr(store if on == "store" else validator, name, value)

    def leave(store: DefaultMessageStore, validator: PutValidator) -> None:
        setattr(store if on == "store" else validator, name, normal)

    return name, enter, leave


def _dispatch_failing(store: DefaultMessageStore, _: PutValidator) -> None:
    store.reput_service.failure = "injected"


def _dispatch_working(store: DefaultMessageStore, _: PutValidator) -> None:
    store.reput_service.failure = ""


def _dispatch_far_behind(_: DefaultMessageStore, validator: PutValidator) -> None:
    validator.max_dispatch_lag = -1  # any log is further behind than that


def _dispatch_within(store: DefaultMessageStore, validator: PutValidator) -> None:
    validator.max_dispatch_lag = store.config.max_dispatch_lag_bytes


def _lock_held_long(store: DefaultMessageStore, _: PutValidator) -> None:
    store.commit_log.begin_time_in_lock_ms = int(time.time() * 1000) - store.config.os_page_cache_busy_timeout_ms - 1000


def _lock_free(store: DefaultMessageStore, _: PutValidator) -> None:
    store.commit_log.begin_time_in_lock_ms = 0


TOGGLES = [
    _set("disk_full", True, False),
    _set("space_exhausted", True, False),
    _set("is_slave", True, False, on="validator"),
    ("dispatch failing", _dispatch_failing, _dispatch_working),
    ("dispatch behind", _dispatch_far_behind, _dispatch_within),
    ("put lock held too long", _lock_held_long, _lock_free),
]


def one_raw() -> PackedProduce:
    packed = packed_raw(b"body", 0, 1024)
    assert packed is not None
    return packed


@pytest.mark.parametrize("toggle", TOGGLES, ids=[t[0] for t in TOGGLES])
def test_the_lane_admits_exactly_when_check_state_has_no_refusal(store: DefaultMessageStore, toggle: Toggle) -> None:
    validator = store.validator
    _, enter, leave = toggle
    assert store.put_message(MessageInner("t", b"first", 0)).ok  # the log's first file (the lane does not make one)
    end = store.commit_log.get_max_offset()
    assert validator.check_state() is None and validator.admits_plain("t", 0, 1)
    enter(store, validator)
    try:
        refusal = validator.check_state()
        assert refusal is not None and refusal.status is not PutMessageStatus.PUT_OK
        assert not validator.admits_plain("t", 0, 1)
        assert store.put_packed("t", 0, one_raw(), DEFAULT_BORN_HOST, False) is None  # nothing stored
        assert store.commit_log.get_max_offset() == end
    finally:
        leave(store, validator)
    assert validator.check_state() is None and validator.admits_plain("t", 0, 1)
    assert store.put_packed("t", 0, one_raw(), DEFAULT_BORN_HOST, False) is not None


def test_a_stopped_store_admits_nothing(store: DefaultMessageStore) -> None:
    validator = store.validator
    store.shutdown()
    assert validator.check_state() is not None and not validator.admits_plain("t", 0, 1)


def test_the_lane_checks_count_queue_and_topic(store: DefaultMessageStore) -> None:
    validator = store.validator
    assert not validator.admits_plain("t", 0, 0)
    assert not validator.admits_plain("t", 0, store.config.max_batch_messages + 1)
    assert not validator.admits_plain("t", -1, 1) and not validator.admits_plain("t", store.config.max_topic_queue_nums, 1)
    assert not validator.admits_plain("a/b", 0, 1)
