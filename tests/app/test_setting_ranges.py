"""Every store, broker and replication setting declares its type and range, and a value outside
them is refused at start with the setting's name (issue: 22 of 61 store settings were never
checked; a zero period busy-looped a core, a string period logged errors every pass)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import BrokerSettings, build_settings
from cluster.settings import ClusterSettings
from core.errors import ConfigInvalid
from core.setting import Bounds, declared_settings
from ha import HASettings
from store import MessageStoreConfig

ROOT = Path(__file__).resolve().parents[2]
TABLES = {"store": MessageStoreConfig, "broker": BrokerSettings, "ha": HASettings, "cluster": ClusterSettings}
NESTED = {"store", "ha", "cluster"}  # BrokerSettings' nested tables, checked by their own classes
# Pauses between two deletions of one cleanup pass, not loop periods: 0 deletes without pausing.
PAUSES = {"delete_commit_log_files_interval_ms", "delete_consume_queue_files_interval_ms", "destroy_mapped_file_interval_forcibly_ms"}


def numeric_settings() -> list[tuple[str, str, Bounds]]:
    out = []
    for table, cls in TABLES.items():
        for f in declared_settings(cls):
            if f.type == "int":
                out.append((table, f.name, f.metadata["tidemq.bounds"]))
    return out


def refused(table: str, name: str, value: object) -> str:
    toml = {table: {name: value}}
    with pytest.raises(ConfigInvalid) as info:
        build_settings(toml, {})
    return str(info.value)


@pytest.mark.parametrize("table", list(TABLES))
def test_every_setting_declares_its_range(table: str) -> None:
    cls = TABLES[table]
    undeclared = [f.name for f in dataclasses.fields(cls) if f not in declared_settings(cls) and f.name not in NESTED]
    assert undeclared == []
    for f in declared_settings(cls):
        bounds = f.metadata["tidemq.bounds"]
        if f.type == "int":
            assert bounds.low is not None and bounds.high is not None, f"{f.name} has no range"
        if f.name.endswith(("_interval_ms", "_timeout_ms", "_poll_ms")) and f.name not in PAUSES:
            assert bounds.low is not None and bounds.low >= 1, f"{f.name}: a zero period or timeout would spin"


@pytest.mark.parametrize(("table", "name", "bounds"), numeric_settings(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_value_outside_the_range_or_of_another_type_names_the_setting(table: str, name: str, bounds: Bounds) -> None:
    assert bounds.low is not None and bounds.high is not None
    assert f"{table} setting {name} must be an integer in {bounds.low}..{bounds.high}, not {bounds.low - 1}" in refused(
        table, name, bounds.low - 1
    )
    assert f"{name} must be an integer" in refused(table, name, bounds.high + 1)
    assert f"{table} setting {name} must be an integer in" in refused(table, name, "10s")
    assert f"{table} setting {name} must be an integer in" in refused(table, name, True)


def test_unused_settings_are_gone() -> None:
    names = {f.name for f in dataclasses.fields(MessageStoreConfig)}
    assert not names & {"shutdown_flush_timeout_ms", "reput_batch_bytes"}
    assert "unknown store setting 'reput_batch_bytes'" in refused("store", "reput_batch_bytes", 1)


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        (
            "[store]\nflush_interval_consume_queue_ms = 0\n",
            "store setting flush_interval_consume_queue_ms must be an integer in 1..600000, not 0",
        ),
        (
            '[store]\nclean_resource_interval_ms = "10s"\n',
            "store setting clean_resource_interval_ms must be an integer in 1..3600000, not '10s'",
        ),
        ('[store]\nflush_disk_type = "SOMETIMES"\n', "store setting flush_disk_type must be one of ASYNC_FLUSH, SYNC_FLUSH"),
        ("[ha]\nio_poll_ms = 0\n", "ha setting io_poll_ms must be an integer in 1..60000, not 0"),
        ("[broker]\nread_threads = 0\n", "broker setting read_threads must be an integer in 1..256, not 0"),
    ],
)
def test_the_broker_refuses_to_start_with_one_line_and_exit_2(tmp_path: Path, toml: str, words: str) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(toml)
    proc = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", "0", "--store", str(tmp_path / "store"), "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert not (tmp_path / "store").exists(), "nothing is created before the settings are checked"


def test_the_settings_page_is_generated_from_the_declarations() -> None:
    from app.settings_doc import render

    assert (ROOT / "docs" / "settings.md").read_text() == render(), "run `make settings-doc`"
