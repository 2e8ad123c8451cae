"""Fixtures: real brokers on free loopback ports, each over a temporary store with small files,
always stopped at the end — served from a thread of the test process (tests/app/in_process.py) or,
for a test that needs the process boundary, as a `python -m app serve` process (BrokerProcess)."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.in_process import InProcessBroker
from tests.loopback import bound_port, wait_until_serving

ROOT = Path(__file__).resolve().parents[2]
# Small files so tests cross commitlog and consume queue file boundaries.
SMALL_STORE = """
[store]
mapped_file_size_commit_log_bytes = 262144
mapped_file_size_consume_queue_bytes = 20000
max_message_size_bytes = 65536
max_hash_slot_num = 1000
max_index_num = 4000
"""
SMALL_BROKER = """
[broker]
max_request_body_bytes = 131072
max_json_body_bytes = 1048576
max_wait_ms = 5000
max_pull_messages = 256
"""
# How long a server may take to become ready.
START_TIMEOUT_S = 30.0
# util-linux's prlimit(1): starts a broker under lowered limits (BrokerProcess's nofile_soft, nofile_hard).
PRLIMIT = shutil.which("prlimit") or "/usr/bin/prlimit"


class BrokerProcess:
    """One `python -m app serve` process and an HTTP client for it."""

    def __init__(
        self,
        store_dir: Path,
        config_text: str,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        nofile_soft: int | None = None,
        nofile_hard: int | None = None,
    ) -> None:
        self.store_dir = store_dir
        self.config_path = store_dir.parent / f"{store_dir.name}.toml"
        self.config_path.write_text(config_text)
        self.log_path = store_dir.parent / f"{store_dir.name}.log"
        self.args = args or []
        self.env = env or {}
        # Lower RLIMIT_NOFILE limits for the process (None keeps the test's).
        self.nofile_soft = nofile_soft
        self.nofile_hard = nofile_hard
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.host = "127.0.0.1"  # where the test reaches it; give `--host` in args when it is another
        self.client: httpx.Client | None = None
        self.scheme = "http"  # "https" with client_options={"verify": ...} for a broker serving TLS
        self.client_options: dict[str, Any] = {}

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def start(self) -> BrokerProcess:
        cmd = [
            sys.executable,
            "-m",
            "app",
            "serve",
            "--port",
            "0",
            "--store",
            str(self.store_dir),
            "--config",
            str(self.config_path),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([*self._limits(), *cmd, *self.args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            self.port = bound_port(self.log_path, log_from, self.proc, START_TIMEOUT_S)
        except RuntimeError:
            self.kill()
            raise
        self._close_client()  # a restart's new client replaces the last one
        self.client = httpx.Client(base_url=self.url, timeout=15.0, **self.client_options)
        proc = self.proc
        try:
            wait_until_serving(
                self.client, lambda: None if proc.poll() is None else f"broker exited with {proc.returncode}", START_TIMEOUT_S, 0.05
            )
        except RuntimeError as e:
            self.kill()
            raise RuntimeError(f"{e}:\n{self.log()}") from None
        return self

    def _limits(self) -> list[str]:
        """prlimit(1) before the command when a descriptor limit is lowered: it sets the limits and
        execs the broker (same pid), so no Python code runs in the child between fork and exec (a
        preexec_fn there can hang the child: a warning raised by a finalizer, say, in a forked copy of
        a threaded process)."""
        if self.nofile_soft is None and self.nofile_hard is None:
            return []
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if self.nofile_hard is not None:
            hard = self.nofile_hard if hard == resource.RLIM_INFINITY else min(hard, self.nofile_hard)
        if self.nofile_soft is not None:
            soft = self.nofile_soft if soft == resource.RLIM_INFINITY else min(soft, self.nofile_soft)
        if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard):
            soft = hard

        def text(limit: int) -> str:
            return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)

        return [PRLIMIT, f"--nofile={text(soft)}:{text(hard)}", "--"]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        """Stop with a signal; the exit status (the process is killed if it hangs)."""
        assert self.proc is not None
        self._close_client()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"broker did not stop within {timeout_s}s:\n{self.log()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        self._close_client()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def _close_client(self) -> None:
        if self.client is not None:
            self.client.close()


class MakeBroker:
    """The `make_broker` fixture's factory of started brokers: in this process, or a process of its own with
    `process=True` (also whenever `env` or a descriptor limit is given: those need a process of their own).
    The fixture kills every broker it made at the end of the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[BrokerProcess | InProcessBroker] = []

    def __call__(
        self,
        config_text: str = SMALL_STORE + SMALL_BROKER,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        name: str = "store",
        nofile_soft: int | None = None,
        nofile_hard: int | None = None,
        process: bool = False,
    ) -> BrokerProcess | InProcessBroker:
        broker: BrokerProcess | InProcessBroker
        if process or env or nofile_soft is not None or nofile_hard is not None:
            broker = BrokerProcess(self.tmp_path / name, config_text, args, env, nofile_soft, nofile_hard)
        else:
            broker = InProcessBroker(self.tmp_path / name, config_text, args)
        self.started.append(broker)
        return broker.start()


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[MakeBroker]:
    """Brokers for one test (MakeBroker), all stopped at its end."""
    factory = MakeBroker(tmp_path)
    try:
        yield factory
    finally:
        for broker in factory.started:
            broker.kill()


def running_broker(
    factory: pytest.TempPathFactory, name: str, config_text: str, process: bool = False
) -> Iterator[BrokerProcess | InProcessBroker]:
    """A broker for a module's or the session's tests (a fixture yields from it), stopped at the end;
    in this process unless `process`."""
    store_dir = factory.mktemp(name) / "store"
    broker = BrokerProcess(store_dir, config_text) if process else InProcessBroker(store_dir, config_text)
    try:
        yield broker.start()
    finally:
        broker.kill()


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | InProcessBroker]:
    """One broker for the tests that only need a running server (they use topics of their own)."""
    yield from running_broker(tmp_path_factory, "shared", SMALL_STORE + SMALL_BROKER)


@pytest.fixture
def client(shared_broker: BrokerProcess | InProcessBroker) -> httpx.Client:
    assert shared_broker.client is not None
    return shared_broker.client


@pytest.fixture(scope="session")
def quiet_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | InProcessBroker]:
    """A broker nothing writes to in the background, for the tests that check a refused request
    stored nothing by the commitlog's end (tests/app/helpers.py commitlog_max). On `shared_broker`
    other tests leave writes that land later (delayed and timer messages delivered, receives revived,
    transactions checked back), so its end may move during any test. Only tests that leave no such
    write behind may use this one."""
    yield from running_broker(tmp_path_factory, "quiet", SMALL_STORE + SMALL_BROKER)


@pytest.fixture
def quiet_client(quiet_broker: BrokerProcess | InProcessBroker) -> httpx.Client:
    assert quiet_broker.client is not None
    return quiet_broker.client


@pytest.fixture
def topic() -> str:
    """A fresh topic name per test."""
    return "t-" + uuid.uuid4().hex[:12]
