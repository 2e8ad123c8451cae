"""The store's public API is a contract: app/, ha/ and pipeline/ use `store`'s exports, the
MessageStore Protocol and the byte layouts of `store.layouts` only, and DefaultMessageStore
provides every member of the Protocol."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import pytest

import store
from store import DefaultMessageStore, MessageStore, MessageStoreConfig

ROOT = Path(__file__).resolve().parents[2]
OTHER_PACKAGES = ("app", "ha", "pipeline", "cluster", "tidemq")
PROTOCOL_MEMBERS = frozenset(name for name in vars(MessageStore) if not name.startswith("_"))
# An object named `store` in the other packages is a MessageStore, except BrokerSettings.store
# (app/settings.py), the [store] table: a MessageStoreConfig whose fields are set before the store is built.
CONFIG_ATTRIBUTES = frozenset(f.name for f in dataclasses.fields(MessageStoreConfig)) | {
    name for name in vars(MessageStoreConfig) if not name.startswith("_")
}


def sources() -> list[Path]:
    files = sorted(p for package in OTHER_PACKAGES for p in (ROOT / package).rglob("*.py"))
    assert len(files) > 50  # the walk found the packages
    return files


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def store_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, what) of every import of a store submodule, or of a name `store` does not export."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.startswith("store.") and a.name != "store.layouts"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module.startswith("store.") and node.module != "store.layouts":
                found.append((node.lineno, f"from {node.module} import ..."))
            elif node.module == "store":
                found += [(node.lineno, f"from store import {a.name}") for a in node.names if a.name not in store.__all__]
    return found


def _is_store(node: ast.expr) -> bool:
    """`store`, or `<anything>.store`."""
    return (isinstance(node, ast.Name) and node.id == "store") or (isinstance(node, ast.Attribute) and node.attr == "store")


def store_reaches(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, attribute) of every `store.X` / `….store.X` whose X is neither a Protocol member nor a config field."""
    return [
        (node.lineno, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and _is_store(node.value)
        and node.attr not in PROTOCOL_MEMBERS
        and node.attr not in CONFIG_ATTRIBUTES
    ]


def test_other_packages_import_from_the_store_package_only() -> None:
    offences = [f"{p.relative_to(ROOT)}:{line}: {what}" for p in sources() for line, what in store_imports(parsed(p))]
    assert offences == []


def test_other_packages_use_only_protocol_members_of_a_store() -> None:
    offences = [f"{p.relative_to(ROOT)}:{line}: store.{attr}" for p in sources() for line, attr in store_reaches(parsed(p))]
    assert offences == []


@pytest.mark.parametrize(
    "source, offences",
    [
        ("from store.codec.message_codec import HEADER", [(1, "from store.codec.message_codec import ...")]),
        ("import store.native", [(1, "import store.native")]),
        ("from store import native", [(1, "from store import native")]),
        ("from store import MessageStore, TopicConfig", []),
        ("from app.broker import Broker", []),
    ],
)
def test_the_import_check_catches_submodules(source: str, offences: list[tuple[int, str]]) -> None:
    assert store_imports(ast.parse(source)) == offences


@pytest.mark.parametrize(
    "source, offences",
    [
        ("store.commit_log.get_max_offset()", [(1, "commit_log")]),
        ("self.store.topic_config_manager.get(t)", [(1, "topic_config_manager")]),
        ("store.replication_waiter = w", [(1, "replication_waiter")]),
        ("broker.store.stats.snapshot()", [(1, "stats")]),
        ("store.extra_services.append(s)", [(1, "extra_services")]),
        ("store.register_service(s); store.config.broker_role", []),
        ("self.store.store_path_root_dir = d", []),  # BrokerSettings.store is a MessageStoreConfig
    ],
)
def test_the_reach_check_catches_internals(source: str, offences: list[tuple[int, str]]) -> None:
    assert store_reaches(ast.parse(source)) == offences


def test_the_protocol_lists_what_the_other_packages_need() -> None:
    for name in ("put", "put_message", "get_message", "commit_offsets", "register_service", "set_replication_waiter"):
        assert name in PROTOCOL_MEMBERS
    assert len(PROTOCOL_MEMBERS) > 40


def test_default_message_store_has_every_protocol_member(tmp_path: Path) -> None:
    instance = DefaultMessageStore(MessageStoreConfig(store_path_root_dir=str(tmp_path)))
    assert isinstance(instance, MessageStore)
    missing = sorted(name for name in PROTOCOL_MEMBERS if not hasattr(instance, name))
    assert missing == []
    for name in PROTOCOL_MEMBERS:
        wanted = getattr(MessageStore, name)
        if isinstance(wanted, property):
            continue
        assert callable(getattr(instance, name)), name
        # Same parameter names in the same order; the implementation may add parameters with defaults.
        ours = list(inspect.signature(getattr(DefaultMessageStore, name)).parameters.values())
        theirs = list(inspect.signature(wanted).parameters.values())
        assert [p.name for p in ours[: len(theirs)]] == [p.name for p in theirs], name
        assert all(p.default is not inspect.Parameter.empty for p in ours[len(theirs) :]), name


def test_every_exported_name_exists_and_all_is_sorted() -> None:
    missing = [name for name in store.__all__ if not hasattr(store, name)]
    assert missing == []
    assert len(set(store.__all__)) == len(store.__all__)

    def isort_style(name: str) -> tuple[int, str]:  # CONSTANTS, then Classes, then functions
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert store.__all__ == sorted(store.__all__, key=isort_style)


def test_docs_describe_every_protocol_member_and_export() -> None:
    doc = (ROOT / "docs" / "store-api.md").read_text()
    mentioned = set(re.findall(r"`(\w+)", doc))
    assert sorted(PROTOCOL_MEMBERS - mentioned) == []
    assert sorted(set(store.__all__) - mentioned) == []
