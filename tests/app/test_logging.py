"""Log lines: one format for tidemq's and uvicorn's, text or JSON, and the access log (off by default)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.logs import JsonFormatter, TextFormatter
from tests.app.conftest import ROOT, MakeBroker
from tests.app.scrape import serve_hot_routes

pytestmark = pytest.mark.timeout(90)
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: \S")
ROUTES = {
    "POST": "/v1/topics/{topic}/messages",
    "GET": "/v1/topics/{topic}/queues/{queue_id}/messages",
}


def run_and_stop(make_broker: MakeBroker, **options: Any) -> list[str]:
    broker = make_broker(**options, process=True)  # the log the process writes
    assert broker.client is not None
    serve_hot_routes(broker.client, "t-" + uuid.uuid4().hex[:8], "g-" + uuid.uuid4().hex[:8])
    assert broker.stop() == 0
    return [line for line in broker.log_path.read_text().splitlines() if line]


def test_text_is_the_default_and_uvicorn_lines_share_it_without_an_access_log(make_broker: MakeBroker) -> None:
    lines = run_and_stop(make_broker)
    assert all(TEXT_LINE.match(line) for line in lines), [line for line in lines if not TEXT_LINE.match(line)]
    loggers = {line.split()[2].rstrip(":") for line in lines}
    assert {"tidemq.app", "tidemq.store", "uvicorn.error"} <= loggers, loggers
    assert "tidemq.access" not in loggers  # off by default


def test_json_lines_with_an_access_log(make_broker: MakeBroker) -> None:
    lines = run_and_stop(make_broker, args=["--log-format", "json", "--access-log"])
    entries = [json.loads(line) for line in lines]  # every line is one object
    for entry in entries:
        assert list(entry)[:4] == ["time", "level", "logger", "message"], entry
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", entry["time"]), entry
    assert {"tidemq.app", "tidemq.store", "uvicorn.error"} <= {e["logger"] for e in entries}
    access = [e for e in entries if e["logger"] == "tidemq.access"]
    produce = [e for e in access if e["method"] == "POST" and e["route"] == ROUTES["POST"]]
    assert len(produce) == 1 and produce[0]["status"] == 201 and produce[0]["bytes"] > 0, produce
    assert produce[0]["path"].startswith("/v1/topics/t-") and produce[0]["message"] == f"POST {produce[0]['path']} 201"
    head = [e for e in access if e["method"] == "HEAD"]
    assert len(head) == 1 and head[0]["route"] == "/healthz" and head[0]["status"] == 200 and head[0]["bytes"] == 0, head
    for entry in access:
        assert isinstance(entry["duration_ms"], float) and entry["duration_ms"] >= 0 and entry["client"].startswith("127.0.0.1:")
    assert {e["route"] for e in access} >= {
        *ROUTES.values(),
        "/v1/groups/{group}/topics/{topic}/receive",
        "/v1/groups/{group}/topics/{topic}/ack",
    }


def test_the_environment_chooses_too_and_the_access_log_ignores_the_level(make_broker: MakeBroker) -> None:
    env = {"TIDEMQ_LOG_FORMAT": "json", "TIDEMQ_ACCESS_LOG": "true", "TIDEMQ_LOG_LEVEL": "warning"}
    entries = [json.loads(line) for line in run_and_stop(make_broker, env=env)]
    assert any(e["logger"] == "tidemq.access" for e in entries)
    assert not [e for e in entries if e["level"] == "INFO" and e["logger"] not in ("tidemq.access", "tidemq.listen")]
    # The bound address is logged whatever the level: a --port 0 start names its port.
    listening = [e["message"] for e in entries if e["logger"] == "tidemq.listen"]
    assert len(listening) == 1 and re.fullmatch(r"listening on http://127\.0\.0\.1:[1-9]\d*", listening[0]), listening


@pytest.mark.parametrize(
    ("option", "env"), [(["--log-format", "xml"], {}), ([], {"TIDEMQ_ACCESS_LOG": "maybe"}), ([], {"TIDEMQ_LOG_FORMAT": "xml"})]
)
def test_a_bad_choice_refuses_the_start(tmp_path: Path, option: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", "0", "--store", str(tmp_path / "s"), *option],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / "s").exists()


def record(**extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("tidemq.test", logging.WARNING, __file__, 1, "disk %s at %d%%", ("/data", 95), None)
    rec.__dict__.update(extra)
    return rec


def test_formatters_put_extra_fields_after_the_message() -> None:
    entry = json.loads(JsonFormatter().format(record(topic="orders", message="not this one", color_message="x", _hint=1)))
    assert entry["message"] == "disk /data at 95%" and entry["level"] == "WARNING" and entry["logger"] == "tidemq.test"
    assert entry["topic"] == "orders" and "color_message" not in entry and "_hint" not in entry
    text = TextFormatter().format(record(topic="orders", status=200, _in_message=("status",)))
    assert text.endswith(" WARNING tidemq.test: disk /data at 95% topic=orders"), text


def test_an_exception_is_kept_whole_in_json() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord("tidemq.test", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    entry = json.loads(JsonFormatter().format(rec))
    assert entry["message"] == "failed" and "ValueError: boom" in entry["exc_info"]
