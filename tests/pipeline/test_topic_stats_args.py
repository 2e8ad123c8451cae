"""The topic_stats job's command line: bad arguments are refused before Spark starts."""

from __future__ import annotations

import pytest

from pipeline.jobs.topic_stats import build_parser, main


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--url", "http://127.0.0.1:1", "--topic", "t"],
        ["--url", "http://127.0.0.1:1", "--out", "o"],
        ["--topic", "t", "--out", "o"],
        ["--url", "u", "--topic", "t", "--out", "o", "--max-messages-per-trigger", "0"],
        ["--url", "u", "--topic", "t", "--out", "o", "--max-messages-per-trigger", "many"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_topics_repeat() -> None:
    args = build_parser().parse_args(["--url", "u", "--topic", "a", "--topic", "b", "--out", "o"])
    assert args.topic == ["a", "b"] and args.checkpoint is None and args.max_messages_per_trigger == 100_000
