"""Dependencies run one way: the import graph between tidemq's packages, and between the store's
sub-packages, has no cycle. Every import counts, those under `if TYPE_CHECKING:` included (a type
import is a dependency a reader follows too).

A module's node is its sub-package inside store (`store.pop`, `store.queue`), a module of store's own
level itself (`store.config`, `store.default_message_store`: each its own node, as the store's
foundations and its top are), the package `store` for its `__init__` (the public API), and its
first part elsewhere (`core`, `app`, `ha`, ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "store", "ha", "cluster", "pipeline", "app", "tidemq")


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    if parts[0] == "store" and len(parts) > 1:
        if parts[1] == "_kernels":
            return "store.native"  # the extension store.native wraps
        if (ROOT / "store" / parts[1]).is_dir() or (ROOT / "store" / f"{parts[1]}.py").is_file():
            return f"store.{parts[1]}"
        return "store"  # a name store's __init__ exports
    return parts[0]


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file() or dotted == "store._kernels"


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from store import native` depends on store.native, `from store import X` on store's API.
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                out.add(name if is_module(name) else node.module)
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            source = package_of(module_of(path))
            if source is None:
                continue
            targets = {package_of(m) for m in imports_of(path)}
            edges.setdefault(source, set()).update(t for t in targets if t is not None and t != source)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle found by a depth-first walk (one per back edge)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_the_packages_import_one_way() -> None:
    found = cycles(graph())
    assert not found, "\n".join(" -> ".join(c) for c in found)


def test_core_imports_nothing_of_tidemq() -> None:
    assert graph().get("core", set()) == set()


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
