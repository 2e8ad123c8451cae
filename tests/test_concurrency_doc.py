"""docs/concurrency.md names every lock of the code, and only locks that exist.

A lock is an attribute `self.x` assigned a `threading.Lock()`, `threading.RLock()`,
`threading.Condition(...)` or `asyncio.Lock()` (or a list comprehension of them) inside a class,
named `Class.x`, or a module-level name so assigned, named `module.NAME` (the file's stem). The
code is read with ast, so a lock in a comment or string does not count.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "store", "app", "ha", "cluster", "pipeline", "tidemq")
DOC = ROOT / "docs" / "concurrency.md"
CONSTRUCTORS = {("threading", "Lock"), ("threading", "RLock"), ("threading", "Condition"), ("asyncio", "Lock")}
# `Class.attribute` or `module.NAME` in backquotes.
NAME = re.compile(r"`([A-Za-z][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)`")
# An attribute named as a lock (`put_lock`, `_queue_locks`), not a method such as `_roll_locked`.
LOCK_LIKE = re.compile(r"lock(s)?$", re.IGNORECASE)


def _is_lock(value: ast.expr | None) -> bool:
    if isinstance(value, ast.ListComp):
        return _is_lock(value.elt)
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return False
    owner = value.func.value
    return isinstance(owner, ast.Name) and (owner.id, value.func.attr) in CONSTRUCTORS


def locks_in(source: str, module: str = "module") -> set[str]:
    """`Class.attribute` of every lock assigned to `self.attribute` in a class of `source`, and
    `module.NAME` of every lock assigned to a name at the module's top level."""
    found: set[str] = set()
    tree = ast.parse(source)
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and _is_lock(stmt.value):
            names = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            found |= {f"{module}.{t.id}" for t in names if isinstance(t, ast.Name)}
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in ast.walk(cls):
            value: ast.expr | None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign):
                targets, value = [node.target], node.value
            else:
                continue
            if not _is_lock(value):
                continue
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    found.add(f"{cls.name}.{t.attr}")
    return found


def code_locks(root: Path) -> set[str]:
    out: set[str] = set()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            out |= locks_in(path.read_text(encoding="utf-8"), path.stem)
    return out


def section(doc: str, title: str) -> str:
    """The text of the `## title` section."""
    start = doc.index(f"\n## {title}\n")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end >= 0 else len(doc)]


def table_locks(doc: str) -> set[str]:
    """The locks in the first column of the "Every lock" table."""
    names: set[str] = set()
    for line in section(doc, "Every lock").splitlines():
        cells = line.split("|")
        if len(cells) > 2:
            m = NAME.fullmatch(cells[1].strip())
            if m:
                names.add(f"{m.group(1)}.{m.group(2)}")
    return names


def problems(code: set[str], doc: str) -> list[str]:
    """What is wrong between the code's locks and the document; empty when they agree."""
    out: list[str] = []
    table = table_locks(doc)
    order = {f"{a}.{b}" for a, b in NAME.findall(section(doc, "The order"))}
    out += [f"{name} is not in the table of docs/concurrency.md" for name in sorted(code - table)]
    out += [f"{name} has no place in the order of docs/concurrency.md" for name in sorted(code - order)]
    # From the order on: the introduction names the lock constructors (`threading.Lock`).
    named = NAME.findall(doc[doc.index("\n## The order\n") :])
    lock_like = {f"{a}.{b}" for a, b in named if LOCK_LIKE.search(b) or f"{a}.{b}" in table}
    out += [f"docs/concurrency.md names {name}, which is no lock of the code" for name in sorted(lock_like - code)]
    return out


def test_the_document_names_every_lock_and_only_existing_ones() -> None:
    code = code_locks(ROOT)
    assert len(code) > 30  # the scan found the locks at all
    assert problems(code, DOC.read_text(encoding="utf-8")) == []


def test_a_new_lock_missing_from_the_document_is_reported(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "store" / "widget.py").write_text(
        "import asyncio\nimport threading\n\n\nclass Widget:\n    def __init__(self) -> None:\n"
        "        self._guard = threading.RLock()\n        self.waiters: asyncio.Lock = asyncio.Lock()\n"
        "        self.stripes = [threading.Lock() for _ in range(4)]\n        self.ready = threading.Event()\n"
    )
    code = code_locks(ROOT) | code_locks(tmp_path)
    assert {"Widget._guard", "Widget.waiters", "Widget.stripes"} <= code
    assert "Widget.ready" not in code  # an Event is no lock
    found = problems(code, DOC.read_text(encoding="utf-8"))
    assert "Widget._guard is not in the table of docs/concurrency.md" in found
    assert "Widget.waiters has no place in the order of docs/concurrency.md" in found
    assert len(found) == 6


def test_a_documented_lock_gone_from_the_code_is_reported() -> None:
    code = code_locks(ROOT)
    assert "CommitLog.put_lock" in code
    found = problems(code - {"CommitLog.put_lock"}, DOC.read_text(encoding="utf-8"))
    assert found == ["docs/concurrency.md names CommitLog.put_lock, which is no lock of the code"]


def test_a_lock_in_a_comment_or_a_string_is_not_counted() -> None:
    source = "import threading\n\n\nclass A:\n    # self.x = threading.Lock()\n    doc = 'self.y = threading.Lock()'\n"
    assert locks_in(source) == set()


def test_a_module_level_lock_is_named_after_its_module() -> None:
    source = "import threading\n\n_GUARD = threading.Lock()\n\n\ndef f() -> None:\n    local = threading.Lock()\n"
    assert locks_in(source, "widget") == {"widget._GUARD"}
