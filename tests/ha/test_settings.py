"""HASettings: the command line and environment forms, and every bad form refused with a clear message."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from core.errors import ConfigInvalid
from ha import HASettings, add_cli_arguments, attach, from_args
from store import BrokerRole, DefaultMessageStore, MessageStoreConfig


def parse(argv: list[str], env: dict[str, str] | None = None) -> HASettings:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    return from_args(parser.parse_args(argv), env or {})


def test_defaults_are_standalone_async() -> None:
    s = parse([])
    assert (s.role, s.ha_port, s.replication) == ("standalone", 10912, "async")
    assert s.broker_role() is BrokerRole.ASYNC_MASTER


def test_roles_map_to_store_roles() -> None:
    assert parse(["--role", "master", "--replication", "sync"]).broker_role() is BrokerRole.SYNC_MASTER
    assert parse(["--role", "master"]).broker_role() is BrokerRole.ASYNC_MASTER
    slave = parse(["--role", "slave", "--master-ha-address", "127.0.0.1:10912"])
    config = slave.apply_to(MessageStoreConfig())
    assert config.broker_role is BrokerRole.SLAVE


def test_environment_fills_what_the_command_line_leaves_out() -> None:
    env = {"TIDEMQ_ROLE": "slave", "TIDEMQ_MASTER_HA_ADDRESS": "127.0.0.1:7000", "TIDEMQ_HA_PORT": "7001", "TIDEMQ_REPLICATION": "sync"}
    s = parse([], env)
    assert (s.role, s.master_ha_address, s.ha_port, s.replication) == ("slave", "127.0.0.1:7000", 7001, "sync")
    assert parse(["--role", "master"], env).role == "master"


@pytest.mark.parametrize(
    ("argv", "env", "words"),
    [
        ([], {"TIDEMQ_ROLE": "leader"}, "role must be one of"),
        ([], {"TIDEMQ_REPLICATION": "semi"}, "replication must be one of async, sync"),
        (["--ha-port", "http"], {}, "ha port must be a port number"),
        (["--ha-port", "70000"], {}, "ha_port must be an integer in 0..65535"),
        (["--role", "slave"], {}, "needs --master-ha-address"),
        (["--role", "slave", "--master-ha-address", "nohost"], {}, "host:port"),
        (["--role", "slave", "--master-ha-address", "h:0"], {}, "host:port"),
    ],
)
def test_bad_settings_are_refused(argv: list[str], env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigInvalid, match=words):
        parse(argv, env)


def test_attach_refuses_a_store_built_with_another_role(tmp_path: Path) -> None:
    store = DefaultMessageStore(MessageStoreConfig(store_path_root_dir=str(tmp_path)))
    before = list(store.extra_services)
    with pytest.raises(AssertionError):
        attach(store, HASettings(role="slave", master_ha_address="127.0.0.1:1"))
    assert attach(store, HASettings()) is None and store.extra_services == before


def test_master_whose_port_is_taken_fails_at_attach(tmp_path: Path) -> None:
    import socket

    from ha import HAStartFailed

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = HASettings(role="master", ha_port=port)
        store = DefaultMessageStore(settings.apply_to(MessageStoreConfig(store_path_root_dir=str(tmp_path))))
        with pytest.raises(HAStartFailed, match="cannot listen"):
            attach(store, settings)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.1", "mq-1.internal"])
def test_a_master_beyond_loopback_without_ha_secret_refuses_to_start(tmp_path: Path, host: str) -> None:
    from ha import HAStartFailed

    settings = HASettings(role="master", ha_port=0, ha_host=host)
    store = DefaultMessageStore(settings.apply_to(MessageStoreConfig(store_path_root_dir=str(tmp_path))))
    with pytest.raises(HAStartFailed, match="without ha_secret"):
        attach(store, settings)
    assert HASettings(role="master", ha_host=host, ha_secret="s" * 16).exposure_problem() is None
    assert HASettings(role="master", ha_host="127.0.0.1").exposure_problem() is None
    assert HASettings(role="master", ha_host="localhost").exposure_problem() is None


def test_serve_refuses_a_master_beyond_loopback_without_ha_secret(tmp_path: Path) -> None:
    """As the HTTP port without an ACL: a one-line refusal and exit status 3, before anything listens."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "app", "serve", "--port", "0", "--store", str(tmp_path / "s"), "--role", "master", "--ha-host", "0.0.0.0"]
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=root, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("tidemq: refusing to listen for slaves on 0.0.0.0"), done.stderr
    assert "without ha_secret" in done.stderr
    assert not (tmp_path / "s").exists(), "refused before the store was touched"
