"""Start-up: the port is checked first, each refusal is one line (exit 3), health answers during recovery."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.conftest import ROOT, SMALL_BROKER, MakeBroker
from tests.app.helpers import problem
from tests.app.store_filler import FILLER_STORE, QUEUES, TOPIC
from tests.loopback import bound_port
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(180)
# Liveness bound of each wait (not a timing assertion).
PATIENCE_S = 60.0
MESSAGES = 100_000


def serve_command(store_dir: Path, port: int, config: Path | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "app", "serve", "--port", str(port), "--store", str(store_dir)]
    return [*cmd, "--config", str(config)] if config is not None else cmd


def refusal_lines(stderr: str) -> list[str]:
    """The lines a refused start printed, without the INFO log lines a start may write first."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if " INFO " not in line]


def test_a_second_broker_on_a_locked_store_prints_one_line_and_exits_3(make_broker: MakeBroker) -> None:
    first = make_broker()
    done = subprocess.run(serve_command(first.store_dir, 0), capture_output=True, text=True, timeout=PATIENCE_S, cwd=ROOT)
    assert done.returncode == 3, done.stderr
    lines = refusal_lines(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("tidemq: ") and "used by another process" in lines[0], done.stderr
    assert first.client is not None
    assert first.client.get("/readyz").status_code == 200  # the first broker is untouched


def test_a_busy_port_fails_fast_with_one_line_before_the_store_is_touched(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        store_dir = tmp_path / "never-loaded"
        done = subprocess.run(serve_command(store_dir, port), capture_output=True, text=True, timeout=PATIENCE_S, cwd=ROOT)
    assert done.returncode == 3, done.stderr
    lines = refusal_lines(done.stderr)
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0], done.stderr
    assert not store_dir.exists()  # neither locked nor loaded: the port was checked first


def test_health_answers_and_ready_reports_progress_during_a_recovery(tmp_path: Path) -> None:
    store_dir = tmp_path / "big"
    filler = [sys.executable, "-m", "tests.app.store_filler", str(store_dir), str(MESSAGES)]
    subprocess.run(filler, check=True, timeout=PATIENCE_S * 2, cwd=ROOT, env={**os.environ})
    assert (store_dir / "abort").exists()  # left as a crash leaves it: the start recovers
    config = tmp_path / "big.toml"
    config.write_text("[store]\n" + "".join(f"{k} = {v}\n" for k, v in FILLER_STORE.items()) + SMALL_BROKER)
    log_path = tmp_path / "big.log"
    with open(log_path, "wb") as log:  # port 0: the port is bound (and named in the log) before the store loads
        proc = subprocess.Popen(serve_command(store_dir, 0, config), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    starting: list[dict[str, Any]] = []
    try:
        port = bound_port(log_path, 0, proc, PATIENCE_S)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=PATIENCE_S) as client:

            def ready() -> bool:
                """Whether the broker is ready; each answer before is checked (and kept, in `starting`)."""
                assert proc.poll() is None, log_path.read_text()
                try:
                    health = client.get("/healthz")
                    ready = client.get("/readyz")
                except httpx.TransportError:
                    return False  # not listening yet
                assert health.status_code == 200
                if ready.status_code == 200:
                    return True
                body = problem(ready, 503, "STARTING")
                assert body["phase"]
                if "total_bytes" in body:
                    assert 0 <= body["scanned_bytes"] <= body["total_bytes"]
                starting.append(body)
                put = client.post(f"/v1/topics/{TOPIC}/messages", json={"body": "early"})
                if put.status_code != 201:  # the load may end between the two requests
                    problem(put, 503, "STARTING")
                return False

            wait_for(ready, PATIENCE_S, what=lambda: f"the broker to be ready:\n{log_path.read_text()}", poll_s=0.005)
            assert starting, "the recovery ended before the server answered: make it longer"
            queues = client.get(f"/v1/topics/{TOPIC}").json()["queues"]
            assert sum(q["max_offset"] for q in queues[:QUEUES]) >= MESSAGES
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(PATIENCE_S) == 0
        finally:
            proc.kill()
