"""Every shell and Python snippet in README.md and docs/*.md runs against a live broker, or says which test
runs it, or why it is not run (a marker line `<!-- snippet: run by tests/... -->` or
`<!-- snippet: not run: why -->` just before its fence)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.app.conftest import ROOT, SMALL_STORE, MakeBroker

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```$", re.S | re.M)
MARKER = re.compile(r"^<!-- snippet: (?:run by (?P<test>tests/\S+\.py)|not run: (?P<why>.+?)) -->$")


@dataclass(frozen=True)
class Snippet:
    doc: Path
    line: int
    lang: str
    code: str
    marker: re.Match[str] | None

    def __str__(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def snippets() -> list[Snippet]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for block in BLOCK.finditer(text):
            before = text[: block.start()].rstrip("\n").rsplit("\n", 1)[-1]
            line = text.count("\n", 0, block.start()) + 1
            found.append(Snippet(doc, line, block.group(1), block.group(2), MARKER.match(before)))
    return found


def test_every_snippet_is_run_here_or_names_its_test_or_why_not() -> None:
    found = snippets()
    assert len(found) > 25
    for snippet in found:
        if snippet.marker is None:
            continue  # run by test_the_unmarked_snippets_run
        test = snippet.marker.group("test")
        if test is not None:
            path = ROOT / test
            assert path.exists(), f"{snippet}: {test} does not exist"
            assert snippet.doc.name in path.read_text(), f"{snippet}: {test} does not read {snippet.doc.name}"
        else:
            assert len(snippet.marker.group("why")) > 20, f"{snippet}: say why it is not run"


UNMARKED = [s for s in snippets() if s.marker is None]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("snippet", UNMARKED, ids=str)
def test_the_unmarked_snippets_run(make_broker: MakeBroker, snippet: Snippet) -> None:
    broker = make_broker(SMALL_STORE)
    address = f"127.0.0.1:{broker.port}"
    code = snippet.code.replace("localhost:8080", address).replace("127.0.0.1:8080", address)
    if snippet.lang == "python":
        command = [sys.executable, "-c", code]
    else:
        tidemq = shlex.join([sys.executable, "-m", "app"])
        code = re.sub(r"(^|\| )tidemq ", lambda m: m.group(1) + tidemq + " ", code, flags=re.M)
        command = ["bash", "-e", "-o", "pipefail", "-c", code]
    env = {**os.environ, "TIDEMQ_URL": broker.url}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"{snippet} failed:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr and '"code":' not in done.stdout, f"{snippet}:\n{done.stdout}\n{done.stderr}"
