"""The history checker's checks find what they are meant to find (tests/cluster/history.py), on histories made by hand."""

from __future__ import annotations

from tests.cluster.history import Fault, Final, History, Op, Sample, broker_of, check

A, B = "http://127.0.0.1:9001", "http://127.0.0.1:9002"
EPOCHS = [(1, A, 0), (2, B, 1_000)]


def produce(message_id: str, broker: str, commitlog_offset: int, queue_offset: int, completed: float = 1.0) -> Op:
    value = {"id": message_id, "queue": 0, "broker": broker, "commitlog_offset": commitlog_offset, "queue_offset": queue_offset}
    return Op("produce", "p0", broker, completed - 0.01, completed, 201, value)


def history_of(*ops: Op) -> History:
    history = History()
    for op in ops:
        history.record(op)
    return history


def test_a_consistent_history_has_no_problem() -> None:
    history = history_of(produce("x", A, 0, 0), produce("y", B, 1_000, 1, completed=3.0))
    history.faults.append(Fault("kill", A, 1.5))
    history.record(Op("read", "r0", B, 4.0, 4.1, 200, {"queue": 0, "offset": 0, "messages": [(0, "x", 0), (1, "y", 1_000)]}))
    final = Final({0: {0: ("x", 0), 1: ("y", 1_000)}}, EPOCHS)
    assert check(history, final, window_s=4.0) == []


def test_each_broken_property_is_reported() -> None:
    history = history_of(
        produce("lost", A, 0, 0),
        produce("moved", A, 100, 1),
        produce("wrong-epoch", A, 1_200, 2),  # accepted by A at an offset of B's epoch
    )
    history.record(Op("read", "r0", A, 2.0, 2.1, 200, {"queue": 0, "offset": 0, "messages": [(0, "lost", 0), (5, "invented", 9)]}))
    history.record(Op("read", "r1", B, 3.0, 3.1, 200, {"queue": 0, "offset": 0, "messages": [(0, "other", 0)]}))
    history.record(produce("other", B, 2_000, 9, completed=9.0))
    history.faults.append(Fault("stop", A, 1.5))
    history.samples += [Sample(A, 1.0, "master", 2, True), Sample(B, 1.1, "master", 2, True)]
    final = Final({0: {0: ("other", 0), 3: ("moved", 200), 2: ("wrong-epoch", 1_200), 9: ("other", 2_000)}}, EPOCHS)
    problems = "\n".join(check(history, final, window_s=4.0))
    for words in (
        "acknowledged produce lost",
        "acknowledged produce moved",
        "wrong-epoch at 1200, in epoch 2 of http://127.0.0.1:9002, was accepted by http://127.0.0.1:9001",
        "'invented'",
        "held acknowledged lost, later other",
        "epoch 2: ['http://127.0.0.1:9001', 'http://127.0.0.1:9002'] all accepted writes",
        "stop of http://127.0.0.1:9001: the next put accepted elsewhere came after 7.50 s",
    ):
        assert words in problems, f"{words!r} not in:\n{problems}"


def test_an_offset_message_id_names_the_broker_that_stored_it() -> None:
    assert broker_of("7F00000100002329" + "0" * 16) == A


def commit(offset: int, invoked: float, completed: float, status: int | None) -> Op:
    return Op("commit", "o0", A, invoked, completed, status, {"queue": 0, "offset": offset})


def offsets_read(value: int, invoked: float) -> Op:
    return Op("offsets", "o0", A, invoked, invoked + 0.1, 200, {"committed": {0: value}})


def test_an_offset_read_below_an_answered_commit_is_reported_unless_the_log_shows_an_unanswered_one_applied_after_it() -> None:
    history = history_of(commit(4, 1.0, 2.0, None), commit(5, 2.1, 2.2, 200), offsets_read(4, 2.3))
    in_order = Final({}, EPOCHS, offset_commits=[(0, 4), (0, 5)])
    late = Final({}, EPOCHS, offset_commits=[(0, 5), (0, 4)])
    assert check(history, late, window_s=4.0) == [], "the unanswered commit of 4 took effect after the one of 5"
    for final in (in_order, Final({}, EPOCHS)):
        assert [p for p in check(history, final, window_s=4.0) if "offset 4 read" in p], "nothing in the log explains 4"
    refused = history_of(commit(4, 1.0, 2.0, 503), commit(5, 2.1, 2.2, 200), offsets_read(4, 2.3))
    refused.of("commit")[0].value["code"] = "NO_MASTER"  # nothing stored: it cannot take effect later
    assert [p for p in check(refused, late, window_s=4.0) if "offset 4 read" in p]
