"""tidemq-store ls / cat / stats over hand-built commitlog files, and its bad inputs."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from pipeline.offline_cli import EXIT_DAMAGED, EXIT_OK, EXIT_USAGE, main
from tests.pipeline.pipeline_helpers import build_commitlog

FILE_SIZE = 4096


def messages(n: int) -> list[tuple[str, int, bytes, dict[str, str]]]:
    return [("orders" if i % 3 else "audit", i % 2, f"body-{i}".encode() * 20, {"TAGS": "TagA", "KEYS": f"k{i} x{i}"}) for i in range(n)]


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, out), out.getvalue()


def test_cat_prints_every_message_in_commitlog_order(tmp_path: Path) -> None:
    written = build_commitlog(tmp_path / "commitlog", FILE_SIZE, messages(30))
    code, text = run(["cat", str(tmp_path)])
    rows = [orjson.loads(line) for line in text.splitlines()]
    assert code == EXIT_OK
    assert [(r["topic"], r["queue_id"], r["queue_offset"], r["commitlog_offset"], r["body"]) for r in rows] == [
        (w.topic, w.queue_id, w.queue_offset, w.commitlog_offset, w.body.decode()) for w in written
    ]
    assert rows[4]["keys"] == ["k4", "x4"] and rows[4]["tags"] == "TagA"


def test_cat_filters_and_limits(tmp_path: Path) -> None:
    written = build_commitlog(tmp_path / "commitlog", FILE_SIZE, messages(30))
    code, text = run(["cat", str(tmp_path), "--topic", "orders", "--queue", "1", "--limit", "3", "--body", "base64"])
    rows = [orjson.loads(line) for line in text.splitlines()]
    expected = [w for w in written if w.topic == "orders" and w.queue_id == 1][:3]
    assert [r["commitlog_offset"] for r in rows] == [w.commitlog_offset for w in expected]
    assert rows[0]["body"] == __import__("base64").b64encode(expected[0].body).decode()
    code, text = run(["cat", str(tmp_path), "--limit", "0"])
    assert (code, text) == (EXIT_OK, "")


def test_stats_counts_per_topic_and_queue(tmp_path: Path) -> None:
    written = build_commitlog(tmp_path / "commitlog", FILE_SIZE, messages(30))
    code, text = run(["stats", str(tmp_path), "--json"])
    report = orjson.loads(text)
    assert code == EXIT_OK
    assert report["messages"] == 30 and report["damaged_files"] == []
    counts = {(q["topic"], q["queue_id"]): (q["messages"], q["min_queue_offset"], q["max_queue_offset"]) for q in report["queues"]}
    for key in {(w.topic, w.queue_id) for w in written}:
        n = sum(1 for w in written if (w.topic, w.queue_id) == key)
        assert counts[key] == (n, 0, n - 1)


def test_ls_and_stats_report_a_torn_tail_and_strict_fails_on_it(tmp_path: Path) -> None:
    written = build_commitlog(tmp_path / "commitlog", FILE_SIZE, messages(4))
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[written[-1].commitlog_offset + 20 :] = b"\x00" * (len(data) - written[-1].commitlog_offset - 20)
    path.write_bytes(bytes(data))
    code, text = run(["ls", str(tmp_path)])
    assert code == EXIT_OK
    line = text.splitlines()[1].split()
    assert line[0] == f"{0:020d}" and line[2] == "3" and line[4] == "TORN" and int(line[5]) == written[-1].commitlog_offset
    code, text = run(["stats", str(tmp_path), "--strict"])
    assert code == EXIT_DAMAGED
    assert "damaged: file 00000000000000000000 at commitlog offset" in text and "messages 3" in text


def test_a_path_that_is_not_a_store_exits_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text = run(["ls", str(tmp_path / "nowhere")])
    assert code == EXIT_USAGE and text == ""
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["frobnicate", "x"], ["cat"], ["cat", "x", "--limit", "-1"], ["cat", "x", "--body", "hex"]])
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == EXIT_USAGE


def test_the_console_script_entry_runs(tmp_path: Path) -> None:
    build_commitlog(tmp_path / "commitlog", FILE_SIZE, messages(2))
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.offline_cli", "stats", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "messages 2" in done.stdout
