"""Settings: defaults, precedence (option > environment > TOML > default) and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import parser, settings_from
from app.settings import BrokerSettings, build_settings
from store import FlushDiskType
from store.errors import ConfigInvalid

ROOT = Path(__file__).resolve().parents[2]


def settings(argv: list[str], env: dict[str, str] | None = None) -> BrokerSettings:
    return settings_from(parser().parse_args(["serve", *argv]), env or {})


def test_defaults() -> None:
    s = settings([])
    assert (s.host, s.port, s.store_dir, s.log_level) == ("127.0.0.1", 8080, "./data", "info")
    assert s.auto_create_topics and s.max_wait_ms == 30_000
    assert s.store.store_path_root_dir == "./data" and s.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH


def test_precedence(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('[broker]\nport = 7000\nhost = "0.0.0.0"\nmax_wait_ms = 100\n[store]\nflush_disk_type = "SYNC_FLUSH"\n')
    s = settings(["--config", str(toml)])
    assert (s.port, s.host, s.max_wait_ms, s.store.flush_disk_type) == (7000, "0.0.0.0", 100, FlushDiskType.SYNC_FLUSH)
    s = settings(["--config", str(toml)], {"TIDEMQ_PORT": "7001", "TIDEMQ_FLUSH": "async", "TIDEMQ_STORE": "/x"})
    assert (s.port, s.store.flush_disk_type, s.store.store_path_root_dir) == (7001, FlushDiskType.ASYNC_FLUSH, "/x")
    s = settings(["--config", str(toml), "--port", "7002", "--host", "127.0.0.1"], {"TIDEMQ_PORT": "7001"})
    assert (s.port, s.host) == (7002, "127.0.0.1")
    s = settings([], {"TIDEMQ_CONFIG": str(toml), "TIDEMQ_LOG_LEVEL": "debug"})
    assert s.port == 7000 and s.log_level == "debug"


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("[broker]\nport = 'x'\n", {}, "port must be an integer"),
        ("[broker]\nnope = 1\n", {}, "unknown broker setting"),
        ("[other]\n", {}, "unknown table"),
        ("[store]\nnope = 1\n", {}, "unknown store setting"),
        ("[store]\nmapped_file_size_commit_log_bytes = 10\n", {}, "commitlog file size"),
        ("[broker]\nauto_create_topics = 1\n", {}, "true or false"),
        ("[broker]\nmax_wait_ms = -1\n", {}, "max_wait_ms"),
        ("not toml [", {}, "not valid TOML"),
        ("", {"TIDEMQ_PORT": "eighty"}, "TIDEMQ_PORT"),
        ("", {"TIDEMQ_FLUSH": "sometimes"}, "flush must be"),
        ("", {"TIDEMQ_LOG_LEVEL": "loud"}, "log level"),
    ],
)
def test_bad_settings(tmp_path: Path, toml: str, env: dict[str, str], message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigInvalid, match=message):
        settings(["--config", str(path)], env)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match="cannot read"):
        settings(["--config", str(tmp_path / "absent.toml")])


def test_example_production_config_is_valid() -> None:
    from app.settings import load_toml

    s = build_settings(load_toml(str(ROOT / "examples" / "production.toml")), {})
    assert s.auto_create_topics is False
    assert s.store.mapped_file_size_commit_log_bytes == 1024**3


def test_bad_option_values_exit_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--flush", "never"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["serve", "--port", "70000"], environ={}) == 2
