"""The offline readers show bodies stored compressed (SYSFLAG bit 0x1) as produced: the rows
both Spark sources build (RowBatchBuilder) and `tidemq-store cat`."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import orjson

from pipeline.commitlog_reader import FileWalk, list_commitlog_files
from pipeline.message_rows import RowBatchBuilder
from pipeline.offline_cli import EXIT_OK, main
from tests.compressed_store import CASES, TOPIC, write_compressed_store


def test_rows_hold_bodies_as_produced_and_say_why_one_is_not(tmp_path: Path) -> None:
    write_compressed_store(str(tmp_path / "store"))
    builder = RowBatchBuilder()
    for f in list_commitlog_files(str(tmp_path / "store")):
        for buf, pos, _size in FileWalk(f, True):
            builder.add(buf, pos)
    batch = builder.flush()
    assert batch is not None
    rows = batch.to_pylist()
    assert [(r["topic"], r["keys"]) for r in rows] == [(TOPIC, [case.key]) for case in CASES]
    assert [(r["body"], r["body_error"]) for r in rows] == [(case.body, case.error) for case in CASES]


def test_cat_shows_bodies_as_produced(tmp_path: Path) -> None:
    write_compressed_store(str(tmp_path / "store"))
    out = io.StringIO()
    assert main(["cat", str(tmp_path / "store"), "--body", "base64"], out) == EXIT_OK
    rows = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [base64.b64decode(r["body"]) for r in rows] == [case.body for case in CASES]
    assert [r.get("body_error") for r in rows] == [case.error for case in CASES]
    assert [r.get("compressed", False) for r in rows] == [bool(case.sys_flag & 1) for case in CASES]
