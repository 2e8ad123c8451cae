"""InProcessBroker: the real server (`app.server.BrokerStart`, what `python -m app serve` runs) in a
thread of the test process, on a loopback port, over a real store — with BrokerProcess's interface.

For tests that need no process boundary: a start costs no interpreter start and no imports. Tests
that kill or signal the broker, read its exit status or the log the process writes, lower its
process limits, set environment variables for it or run the CLI itself use BrokerProcess.

- The options are the command line's (`serve --port 0 --store ... --config ...` and `args`), read
  by the CLI's own `settings_from`, so both kinds of broker are configured alike.
- The process's logging is left alone (the server applies no log config; the one logger uvicorn
  itself detaches, its access logger, is put back at the stop); records of the
  `tidemq` and `uvicorn` loggers at WARNING and above (the level the test process logs at) go to
  `log_path` while the broker runs, for `log()`. Two brokers running at once both see each other's.
- `stop` stops as SIGTERM does and joins the thread; the store's shutdown releases its lock file,
  so the broker can start again over the same store in this process.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import httpx

from app.cli import EXIT_START_FAILED, parser, settings_from
from app.logs import TextFormatter
from app.problems import StartRefused
from app.server import BrokerStart
from ha import HAStartFailed
from tests.loopback import wait_until_serving

# Loggers whose records the broker's log file gets.
BROKER_LOGGERS = ("tidemq", "uvicorn")
# uvicorn's per-request logger, which the server turns off (app.http_requests logs requests instead).
UVICORN_ACCESS_LOGGER = "uvicorn.access"
# Signals a running server stops on; anything else (SIGKILL, say) needs a BrokerProcess.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class InProcessBroker:
    """One broker served from a thread of this process, and an HTTP client for it."""

    def __init__(self, store_dir: Path, config_text: str, args: list[str] | None = None) -> None:
        self.store_dir = store_dir
        self.config_path = store_dir.parent / f"{store_dir.name}.toml"
        self.config_path.write_text(config_text)
        self.log_path = store_dir.parent / f"{store_dir.name}.log"
        self.args = args or []
        self.port = 0
        self.host = "127.0.0.1"  # where the test reaches it; give `--host` in args when it is another
        self.client: httpx.Client | None = None
        self.scheme = "http"  # "https" with client_options={"verify": ...} for a broker serving TLS
        self.client_options: dict[str, Any] = {}
        self.started: BrokerStart | None = None
        self.thread: threading.Thread | None = None
        self.failure: BaseException | None = None  # what the last serve raised
        self._log_handler: logging.Handler | None = None
        self._access_logger_state: tuple[bool, list[logging.Handler]] = (True, [])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> InProcessBroker:
        argv = ["serve", "--port", "0", "--store", str(self.store_dir), "--config", str(self.config_path), *self.args]
        settings = settings_from(parser().parse_args(argv), os.environ)
        self._attach_log()
        try:
            self.started = BrokerStart(settings, own_logging=False)
        except BaseException:
            self._detach_log()
            raise
        self.port = settings.port
        self.failure = None
        self.thread = threading.Thread(target=self._serve, name=f"broker-{self.store_dir.name}", daemon=True)
        self.thread.start()
        if self.client is not None:
            self.client.close()  # a restart's new client replaces the last one
        self.client = httpx.Client(base_url=self.url, timeout=15.0, **self.client_options)
        thread = self.thread
        try:
            wait_until_serving(self.client, lambda: None if thread.is_alive() else f"broker stopped: {self.failure!r}", timeout_s, 0.02)
        except RuntimeError as e:
            self.kill()
            raise RuntimeError(f"{e}\n{self.log()}") from None
        return self

    def _serve(self) -> None:
        assert self.started is not None
        try:
            self.started.serve()
        except BaseException as e:  # kept for stop(): the thread has no one else to tell
            self.failure = e

    def _attach_log(self) -> None:
        handler = logging.FileHandler(self.log_path, encoding="utf-8")
        handler.setFormatter(TextFormatter())
        for name in BROKER_LOGGERS:
            logging.getLogger(name).addHandler(handler)
        self._log_handler = handler
        access = logging.getLogger(UVICORN_ACCESS_LOGGER)
        self._access_logger_state = (access.propagate, list(access.handlers))

    def _detach_log(self) -> None:
        handler, self._log_handler = self._log_handler, None
        if handler is not None:
            for name in BROKER_LOGGERS:
                logging.getLogger(name).removeHandler(handler)
            handler.close()
            # The server's access_log=False (as in the process) detached uvicorn's access logger; put it back.
            access = logging.getLogger(UVICORN_ACCESS_LOGGER)
            access.propagate, access.handlers = self._access_logger_state[0], list(self._access_logger_state[1])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        """Stop as the signal would; the exit status `python -m app serve` would have (0, or 3 for a failed start)."""
        if sig not in STOP_SIGNALS:
            raise ValueError(f"an in-process broker cannot take signal {sig}; use a BrokerProcess")
        assert self.started is not None and self.thread is not None
        if self.client is not None:
            self.client.close()
        self.started.stop()
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            raise AssertionError(f"broker did not stop within {timeout_s}s:\n{self.log()}")
        self._detach_log()
        if isinstance(self.failure, (StartRefused, HAStartFailed)):
            return EXIT_START_FAILED
        if self.failure is not None:
            raise self.failure
        return 0

    def kill(self) -> None:
        """Stop at once if running, for fixtures' clean-up: a thread cannot be killed, so the server stops
        as on a second SIGINT (connections a test left open are not waited for) and the store shuts down.
        The client is closed first, as `stop` does: its connections end before the server's."""
        if self.client is not None:
            self.client.close()
        if self.thread is not None and self.thread.is_alive():
            assert self.started is not None
            self.started.stop()
            self.started.server.force_exit = True
            self.thread.join(20.0)
        self._detach_log()
