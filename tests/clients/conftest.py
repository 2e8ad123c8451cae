"""Fixtures of the generated-client tests: a broker on loopback, and the npm tools the TypeScript
clients are generated and compiled with (tests/clients/node: package.json and package-lock.json
pin them; `npm ci` installs them into its git-ignored node_modules once per lock file)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.conftest import SMALL_STORE, BrokerProcess, running_broker
from tests.app.in_process import InProcessBroker

NODE_DIR = Path(__file__).resolve().parent / "node"
# Written after a successful `npm ci`: the lock file's hash it installed.
STAMP = NODE_DIR / "node_modules" / ".tidemq-installed"
NPM_CI_TIMEOUT_S = 600


@pytest.fixture(scope="session")
def clients_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | InProcessBroker]:
    # The broker's default max_wait_ms: the walk-throughs hold pulls for 10 s as README does; push to
    # loopback allowed as `make run` does (the walk-throughs' push subscriptions deliver there).
    yield from running_broker(tmp_path_factory, "clients", SMALL_STORE + '[broker]\npush_allowed_hosts = ["127.0.0.1"]\n')


@pytest.fixture(scope="session")
def node_tools() -> Path:
    """tests/clients/node/node_modules/.bin, installed by `npm ci` when the lock file changed."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed (Debian: apt-get install nodejs npm)")
    lock = hashlib.sha256((NODE_DIR / "package-lock.json").read_bytes()).hexdigest()
    if not STAMP.exists() or STAMP.read_text() != lock:
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True, text=True, timeout=NPM_CI_TIMEOUT_S
        )
        assert done.returncode == 0, f"npm ci failed in {NODE_DIR}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        STAMP.write_text(lock)
    return NODE_DIR / "node_modules" / ".bin"
