"""Write docs/settings.md: every setting of the [broker], [store], [ha] and [cluster] tables with its type,
default, range and the one-line comment above its declaration.

Usage: python -m app.settings_doc docs/settings.md (the Makefile's `settings-doc` target); a test
compares the checked-in page with this output, so the page cannot drift from the declarations.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import sys
from typing import Any

from app.generated_file import write_generated
from app.settings import BrokerSettings
from cluster.settings import ClusterSettings
from core import BOUNDS_KEY, Bounds, declared_settings
from ha import HASettings
from store import MessageStoreConfig

TABLES: tuple[tuple[str, type], ...] = (
    ("broker", BrokerSettings),
    ("store", MessageStoreConfig),
    ("ha", HASettings),
    ("cluster", ClusterSettings),
)
HEADER = """# Settings

Every setting of the TOML file's tables, generated from their declarations by
`make settings-doc` (`python -m app.settings_doc docs/settings.md`). Each is checked at start:
a value of another type or outside its range stops the broker with one line naming the setting
(exit status 2), before anything is created. Relations between settings (for example that a
commitlog file holds the largest message) are checked after the ranges. Where the command line
or the environment sets a value too, see [http-api.md](http-api.md#running-the-broker).
"""


def field_comments(cls: type) -> dict[str, str]:
    """The comment lines right above each field's declaration, joined."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        text = line.strip()
        if text.startswith("#"):
            pending.append(text.lstrip("# ").rstrip())
        elif ":" in text and not text.startswith(("def ", "class ", '"""', "@")) and pending:
            comments[text.split(":", 1)[0].strip()] = " ".join(pending)
            pending = []
        else:
            pending = []
    return comments


def default_text(f: dataclasses.Field[Any], instance: Any) -> str:
    value = getattr(instance, f.name)
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if f.default is dataclasses.MISSING and f.name == "store_path_root_dir":
        return "`~/store`"
    return "none" if value is None else f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def range_text(bounds: Bounds) -> str:
    if bounds.choices is not None:
        return ", ".join(f"`{c}`" for c in bounds.choices)
    if bounds.low is not None and bounds.high is not None:
        return f"{bounds.low:,} .. {bounds.high:,}"
    return ""


def render() -> str:
    parts = [HEADER]
    for table, cls in TABLES:
        comments = field_comments(cls)
        instance = cls()
        parts.append(f"\n## [{table}]\n\n| setting | type | default | range | what it is |\n|---|---|---|---|---|\n")
        for f in declared_settings(cls):
            kind = str(f.type).replace(" | None", " or none")
            comment = comments.get(f.name, "").replace("|", "\\|")
            parts.append(f"| `{f.name}` | {kind} | {default_text(f, instance)} | {range_text(f.metadata[BOUNDS_KEY])} | {comment} |\n")
    return "".join(parts)


if __name__ == "__main__":
    sys.exit(write_generated(sys.argv[1:], "app.settings_doc", lambda: render().encode()))
