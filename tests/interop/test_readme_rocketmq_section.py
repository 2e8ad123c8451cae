"""README's "Serving an existing RocketMQ store" stays true: its settings are store settings whose
defaults are RocketMQ's, as the section says, and the sizes the interop tests use are accepted."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

from store import MessageStoreConfig
from tests.interop import scenario

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Serving an existing RocketMQ store"


def _toml_block() -> dict[str, Any]:
    section = (ROOT / "README.md").read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```toml\n(.*?)```", section, re.S)
    assert match, "the section has a toml block"
    return tomllib.loads(match.group(1))


def test_readme_settings_are_store_settings_at_their_defaults() -> None:
    store = _toml_block()["store"]
    defaults = MessageStoreConfig()
    assert store == {name: getattr(defaults, name) for name in store}
    MessageStoreConfig.from_dict(store).validate()


def test_the_interop_sizes_are_accepted() -> None:
    store = tomllib.loads(scenario.TIDEMQ_STORE_SETTINGS)["store"]
    config = MessageStoreConfig.from_dict(store).validate()
    assert {f.name for f in dataclasses.fields(config)} >= set(store)
