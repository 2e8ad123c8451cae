"""docs/architecture.md stays true: every module and directory it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
# A path of the repository: a package directory and a file name (`store/queue/consume_queue.py`, `store/_native/gather.c`).
PATH = re.compile(r"`((?:core|store|ha|cluster|pipeline|app|tidemq|tests)/[A-Za-z0-9_/]*(?:\.py|\.c|/))`")


def named_paths() -> list[str]:
    return sorted(set(PATH.findall(DOC.read_text(encoding="utf-8"))))


def test_every_named_module_exists() -> None:
    names = named_paths()
    assert len(names) > 60  # the page names the modules of every path it describes
    missing = [n for n in names if not (ROOT / n).exists()]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_store_sub_package_is_in_the_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    packages = sorted(p.name for p in (ROOT / "store").iterdir() if (p / "__init__.py").is_file())
    absent = [p for p in packages if f"`store/{p}/`" not in text]
    assert not absent, f"store sub-packages missing from docs/architecture.md: {absent}"
