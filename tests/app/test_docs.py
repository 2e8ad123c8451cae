"""docs/http-api.md stays true: its curl walk-through runs as written, its tables list every code and metric."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from app.problems import PROBLEMS
from tests.app.conftest import SMALL_STORE, MakeBroker

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "http-api.md").read_text()


def quick_start() -> str:
    section = DOC.split("## Quick start", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match
    return match.group(1)


@pytest.mark.timeout(120)
def test_the_curl_walk_through_works_as_written(make_broker: MakeBroker) -> None:
    # The broker's defaults (max_wait_ms 30000), small files, push to loopback allowed as `make run` does.
    broker = make_broker(SMALL_STORE + '[broker]\npush_allowed_hosts = ["127.0.0.1"]\n')
    with socket.socket() as probe:  # a free port for the walk-through's push receiver (9000 as written)
        probe.bind(("127.0.0.1", 0))
        receiver_port = probe.getsockname()[1]
    script = quick_start().replace("localhost:8080", f"127.0.0.1:{broker.port}").replace("9000", str(receiver_port))
    assert script.count(f"127.0.0.1:{broker.port}") == quick_start().count("localhost:8080") > 5
    done = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert '"code":' not in out, out  # no problem replies
    assert out.count('"status":"FOUND"') == 4, out  # the first pull, the held one, by tag and by SQL92 filter
    assert '"body":"order 1 paid"' in out and '"tags":"paid"' in out
    assert '"committed_offset":2' in out and '"lag":0' in out
    assert out.count('"status":"OK"') == 2 and '"receipt_handle":' in out, out  # both messages received once and acked
    assert out.count("pushed: order 1 ") == 2 and "signature t=" in out, out  # both messages pushed to the receiver
    assert '"group":"audit","topic":"orders"' in out, out
    key_query = out.rsplit('{"messages":', 1)[1]
    assert key_query.count('"keys":["order-1"]') == 2, out


def test_every_problem_code_is_documented() -> None:
    for code, kind in PROBLEMS.items():
        assert f"| `{code}` | {kind.status} |" in DOC, code


def test_every_metric_is_documented(client: httpx.Client) -> None:
    names = set(re.findall(r"^# TYPE (tidemq_\w+) ", client.get("/metrics").text, re.M))
    assert names
    for name in names:
        assert f"`{name}`" in DOC or f"`{name}{{" in DOC or f"`{name}`," in DOC, name
