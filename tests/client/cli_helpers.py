"""Runs the `tidemq` command line (`python -m app ...`) as a user would, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from tests.app.conftest import ROOT

# Longest a command may run in a test before it is killed (a hang fails the test).
COMMAND_TIMEOUT_S = 60


@dataclass
class Done:
    returncode: int
    stdout: bytes
    stderr: str

    def lines(self) -> list[str]:
        return self.stdout.decode().splitlines()


def command_env(url: str, env: dict[str, str] | None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("TIDEMQ_URL", "TIDEMQ_TOKEN")}
    return {**base, "TIDEMQ_URL": url, **(env or {})}


def tidemq(url: str, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> Done:
    done = subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        env=command_env(url, env),
        timeout=COMMAND_TIMEOUT_S,
    )
    return Done(done.returncode, done.stdout, done.stderr.decode())


def start(url: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A command left running (consume --follow); the caller waits for it with a timeout."""
    return subprocess.Popen(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=command_env(url, env),
    )
