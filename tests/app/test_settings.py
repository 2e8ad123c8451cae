"""Settings: defaults, precedence (option > environment > TOML > default) and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import parser, settings_from
from app.settings import BrokerSettings, build_settings
from core.errors import ConfigInvalid
from store import BrokerRole, FlushDiskType

ROOT = Path(__file__).resolve().parents[2]


def settings(argv: list[str], env: dict[str, str] | None = None) -> BrokerSettings:
    return settings_from(parser().parse_args(["serve", *argv]), env or {})


def test_defaults() -> None:
    s = settings([])
    assert (s.host, s.port, s.store_dir, s.log_level) == ("127.0.0.1", 8080, "./data", "info")
    assert not s.auto_create_topics and s.max_wait_ms == 30_000  # topics are created explicitly by default
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
        ("[store]\nmapped_file_size_commit_log_bytes = 10\n", {}, "mapped_file_size_commit_log_bytes must be an integer in 4096.."),
        ("[broker]\nauto_create_topics = 1\n", {}, "true or false"),
        ("[broker]\nmax_wait_ms = -1\n", {}, "max_wait_ms"),
        ("not toml [", {}, "not valid TOML"),
        ("", {"TIDEMQ_PORT": "eighty"}, "TIDEMQ_PORT"),
        ("", {"TIDEMQ_FLUSH": "sometimes"}, "flush must be"),
        ("", {"TIDEMQ_LOG_LEVEL": "loud"}, "log_level must be one of critical, error"),
        ("[ha]\nrole = 'leader'\n", {}, "role must be one of"),
        ("[ha]\nnope = 1\n", {}, "unknown ha setting"),
        ("[ha]\nha_port = '10912'\n", {}, "ha_port must be an integer"),
        ("[ha]\nha_port = true\n", {}, "ha_port must be an integer"),
        ("[ha]\nha_port = 70000\n", {}, "ha_port must be an integer in 0..65535, not 70000"),
        ("[ha]\nrole = 1\n", {}, "role must be a string"),
        ("[ha]\nrole = 'slave'\n", {}, "needs --master-ha-address"),
        ("[ha]\nrole = 'slave'\nmaster_ha_address = 'nohost'\n", {}, "host:port"),
        ("[ha]\nconnect_timeout_ms = 0\n", {}, "connect_timeout_ms must be an integer in 1..600000, not 0"),
        ("[ha]\nreplication = 'semi'\n", {}, "replication must be one of async, sync, not 'semi'"),
        ("", {"TIDEMQ_HA_PORT": "http"}, "ha port must be a port number"),
        ("", {"TIDEMQ_ROLE": "leader"}, "role must be one of"),
        ("[store]\nbroker_role = 'SYNC_MASTER'\n", {"TIDEMQ_ROLE": "master"}, "contradicts the replication role"),
    ],
)
def test_bad_settings(tmp_path: Path, toml: str, env: dict[str, str], message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigInvalid, match=message):
        settings(["--config", str(path)], env)


def test_replication_precedence(tmp_path: Path) -> None:
    """--role and friends: option > TIDEMQ_* variable > [ha] table > default, like every other option."""
    toml = tmp_path / "c.toml"
    toml.write_text('[broker]\nport = 7000\n[ha]\nrole = "master"\nha_port = 9000\nreplication = "sync"\nio_poll_ms = 50\n')
    s = settings(["--config", str(toml)])
    assert (s.ha.role, s.ha.ha_port, s.ha.replication, s.ha.io_poll_ms) == ("master", 9000, "sync", 50)
    assert s.store.broker_role is BrokerRole.SYNC_MASTER
    assert s.ha.advertised_http_address == "http://127.0.0.1:7000"
    s = settings(["--config", str(toml)], {"TIDEMQ_HA_PORT": "9001", "TIDEMQ_REPLICATION": "async"})
    assert (s.ha.ha_port, s.ha.replication, s.store.broker_role) == (9001, "async", BrokerRole.ASYNC_MASTER)
    s = settings(["--config", str(toml), "--ha-port", "9002", "--advertised-http-address", "http://mq:80"], {"TIDEMQ_HA_PORT": "9001"})
    assert (s.ha.ha_port, s.ha.advertised_http_address) == (9002, "http://mq:80")
    env = {"TIDEMQ_ROLE": "slave", "TIDEMQ_MASTER_HA_ADDRESS": "10.0.0.1:9000"}
    s = settings(["--config", str(toml)], env)
    assert (s.ha.role, s.ha.master_ha_address, s.store.broker_role) == ("slave", "10.0.0.1:9000", BrokerRole.SLAVE)
    s = settings(["--config", str(toml), "--role", "standalone"], env)
    assert s.ha.role == "standalone" and s.store.broker_role is BrokerRole.ASYNC_MASTER


def test_replication_defaults_and_an_agreeing_store_role(tmp_path: Path) -> None:
    s = settings([])
    assert (s.ha.role, s.ha.ha_port, s.ha.replication) == ("standalone", 10912, "async")
    assert s.store.broker_role is BrokerRole.ASYNC_MASTER and s.ha.advertised_http_address is None
    toml = tmp_path / "c.toml"
    toml.write_text('[store]\nbroker_role = "SLAVE"\n')
    s = settings(["--config", str(toml), "--role", "slave", "--master-ha-address", "127.0.0.1:9"])
    assert s.store.broker_role is BrokerRole.SLAVE


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
    assert main(["serve", "--role", "slave"], environ={}) == 2
    assert "needs --master-ha-address" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--role", "leader"])
    assert exit_info.value.code == 2


def test_a_port_0_start_derives_its_addresses_from_the_port_it_bound() -> None:
    s = settings(["--port", "0", "--cluster-etcd", "http://127.0.0.1:2379", "--broker-name", "a"])
    assert s.ha.advertised_http_address == "http://127.0.0.1:0" and s.store.store_port == 0
    s.bound_to(43210)
    assert s.port == 43210 and s.http_url() == "http://127.0.0.1:43210"
    # The advertised address and a cluster's store port (its offset message ids) follow the bound port.
    assert s.ha.advertised_http_address == "http://127.0.0.1:43210" and s.store.store_port == 43210
    given = settings(["--port", "0", "--cluster-etcd", "http://127.0.0.1:2379", "--broker-name", "a",
                      "--advertised-http-address", "http://mq-1:8080"])  # fmt: skip
    given.bound_to(43211)
    assert given.ha.advertised_http_address == "http://mq-1:8080", "an address given is kept"
