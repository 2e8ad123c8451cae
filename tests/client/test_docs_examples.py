"""The client examples in README.md and docs/client.md run as written against a real broker."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.app.conftest import ROOT, SMALL_STORE, MakeBroker

README = (ROOT / "README.md").read_text()
CLIENT_DOC = (ROOT / "docs" / "client.md").read_text()


def block(text: str, heading: str, lang: str) -> str:
    section = text.split(heading, 1)[1]
    match = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert match, heading
    return match.group(1)


def run_sh(script: str, url: str) -> subprocess.CompletedProcess[str]:
    command = shlex.join([sys.executable, "-m", "app"])
    script = re.sub(r"(^|\| )tidemq ", lambda m: m.group(1) + command + " ", script, flags=re.M)
    env = {**os.environ, "TIDEMQ_URL": url}
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def run_python(code: str, url: str) -> subprocess.CompletedProcess[str]:
    code = code.replace("http://127.0.0.1:8080", url)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(180)
def test_the_readme_client_examples_run(make_broker: MakeBroker) -> None:
    broker = make_broker(SMALL_STORE)
    cli = run_sh(block(README, "## Command-line client", "sh"), broker.url)
    assert cli.returncode == 0, cli.stderr
    out = cli.stdout.splitlines()
    json_lines = [line for line in out if line.startswith("{")]  # consume --format json
    assert len(json_lines) == 3 and all('"keys":["batch-7"]' in line and '"tags":"created"' in line for line in json_lines)
    bodies = [line for line in out if line.startswith("order ")]
    created = ["order 1 created", "order 2 created", "order 3 created"]
    # --offset 1 of queue 0; the group's 2 then its last 3 (from every queue); the key lookup's 3.
    assert bodies[:2] == ["order 2 created", "order 3 created"]
    assert sorted(bodies[2:7]) == [*created, "order 4 paid", "order 5 paid"]
    assert sorted(bodies[7:]) == created
    # -K : split each line's key off, -H added a property, -o -2 -f printed the last two of queue 2.
    assert "2/0 key=order-4 order 4 paid (source=cli)" in out and "2/1 key=order-5 order 5 paid (source=cli)" in out
    assert any(line.split()[:2] == ["shipping", "orders"] for line in out) and out[-1].startswith("tidemq ")
    assert any(line.startswith("GROUP shipping") for line in out)  # groups describe
    python = run_python(block(README, "## Python client", "python"), broker.url)
    assert python.returncode == 0, python.stderr
    assert python.stdout.splitlines() == ["[b'order 4 created', b'order 5 created', b'order 6 created']", "QUEUE_NOT_FOUND 404"]


@pytest.mark.timeout(180)
def test_the_client_doc_examples_run(make_broker: MakeBroker) -> None:
    broker = make_broker(SMALL_STORE)
    python = run_python(block(CLIENT_DOC, "## Python client", "python"), broker.url)
    assert python.returncode == 0, python.stderr
    assert python.stdout.splitlines()[-1] == "TOPIC_NOT_FOUND 404 topic no-such-topic does not exist"
    cli = run_sh(block(CLIENT_DOC, "## Command-line client", "sh"), broker.url)
    assert cli.returncode == 0, cli.stderr
    assert [line for line in cli.stdout.splitlines() if '"body":"order' in line][-2:]
