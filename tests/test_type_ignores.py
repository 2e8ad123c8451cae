"""Every `# type: ignore` in the packages and the tests names its error code and says why it is there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "app", "store", "ha", "pipeline", "tidemq", "cluster", "tests", "bench")
JUSTIFIED = re.compile(r"# type: ignore\[[a-z-]+(?:, *[a-z-]+)*\]  # \S")


def test_each_type_ignore_names_its_code_and_its_reason() -> None:
    unjustified = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue  # this file names the comment it looks for
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if "type: ignore" in line and not JUSTIFIED.search(line):
                    unjustified.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not unjustified, "\n".join(unjustified)
