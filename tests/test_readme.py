"""The README stays true: its walk-through is the one tests/app/test_docs.py runs, its links resolve."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def sh_block(text: str, heading: str) -> str:
    section = text.split(heading, 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, heading
    return match.group(1)


def test_quick_start_is_the_tested_walk_through() -> None:
    docs = (ROOT / "docs" / "http-api.md").read_text()
    assert sh_block(README, "## Quick start") == sh_block(docs, "## Quick start")


def test_the_two_setup_commands_are_make_targets() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target in (
        "run",
        "test",
        "test-fast",
        "openapi",
        "bench-store",
        "bench-http",
        "bench-ha",
        "bench-spark",
        "bench-compare",
        "bench-http-clients",
        "bench-schedule",
        "bench-offsets",
        "bench-kernels",
        "settings-doc",
    ):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target


def test_relative_links_resolve() -> None:
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in link:
            assert (ROOT / link).exists(), link
