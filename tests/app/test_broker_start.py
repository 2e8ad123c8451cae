"""BrokerStart with own_logging off, in a process whose logging belongs to other work (the test
process here, through tests/app/in_process.py): the logging is left as it was found, a stop
releases the store's lock so the same process can serve the store again, and a start the lock
refuses closes the port it had bound."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from app.cli import parser, settings_from
from app.problems import StartRefused
from app.server import BrokerStart
from store import StoreLocked
from store.disk.lock_file import StoreLockFile
from tests.app.conftest import SMALL_BROKER, SMALL_STORE
from tests.app.in_process import InProcessBroker


def logging_state() -> tuple[list[logging.Handler], int, dict[str, tuple[int, bool, list[logging.Handler]]]]:
    names = ("tidemq", "tidemq.app", "tidemq.listen", "uvicorn", "uvicorn.error", "uvicorn.access")
    loggers = {name: logging.getLogger(name) for name in names}
    root = logging.getLogger()
    return list(root.handlers), root.level, {n: (lg.level, lg.propagate, list(lg.handlers)) for n, lg in loggers.items()}


def test_a_server_that_does_not_own_logging_leaves_it_and_restarts_over_its_store(tmp_path: Path) -> None:
    before = logging_state()
    broker = InProcessBroker(tmp_path / "store", SMALL_STORE + SMALL_BROKER)
    broker.start()
    assert broker.client is not None
    assert broker.client.put("/v1/topics/again", json={"queues": 1}).status_code == 201
    sent = broker.client.post("/v1/topics/again/messages", json={"body": "kept", "queue_id": 0})
    assert sent.status_code == 201, sent.text
    with pytest.raises(StoreLocked):  # held while it serves, against this process too
        StoreLockFile(str(broker.store_dir), str(broker.store_dir / "lock")).acquire()
    assert broker.stop() == 0
    assert logging_state() == before
    broker.start()  # the same store in the same process: the stop released the lock
    assert broker.client is not None
    got = broker.client.get("/v1/topics/again/queues/0/messages", params={"offset": 0}).json()
    assert [m["body"] for m in got["messages"]] == ["kept"]
    assert broker.stop() == 0
    assert logging_state() == before


def test_a_start_refused_by_a_held_store_closes_the_port_it_bound(tmp_path: Path) -> None:
    first = InProcessBroker(tmp_path / "store", SMALL_STORE + SMALL_BROKER).start()
    try:
        argv = ["serve", "--port", "0", "--store", str(first.store_dir), "--config", str(first.config_path)]
        settings = settings_from(parser().parse_args(argv), {})
        with pytest.raises(StartRefused, match="is used by another process"):
            BrokerStart(settings, own_logging=False)
        assert settings.port != 0  # it bound a port before it tried the store's lock
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", settings.port), timeout=5).close()
    finally:
        assert first.stop() == 0
