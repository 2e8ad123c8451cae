"""The systems the comparison runs: tidemq and the brokers a user would pick instead.

Each peer is a server process the harness starts on loopback with its own temporary data
directory and stops at the end (`with peer.running(workdir):`). A peer whose binary is
missing is installed with apt when the harness may (bounded by `APT_TIMEOUT_S`), otherwise
it is skipped with the reason in `Unavailable`.

Invariants: a started peer listens only on 127.0.0.1 on a port that was free a moment
before; `stop()` always leaves no process behind (SIGTERM, then SIGKILL after
`STOP_TIMEOUT_S`); `command` is the exact argv that was run, for the report.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

# Longest an `apt-get update` or `apt-get install` of one peer may take before it is abandoned.
APT_TIMEOUT_S = 300
# Longest a peer may take to answer its readiness probe after being started.
START_TIMEOUT_S = 60
# Longest a peer may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 20
# Interval between two readiness probes.
PROBE_INTERVAL_S = 0.1
# Lines of a failed peer's log quoted in the error.
LOG_TAIL_LINES = 20

# Directories searched for a binary besides PATH (Debian puts nats-server in /usr/sbin).
SYSTEM_BIN_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin", "/usr/local/sbin")

# Extra settings given to tidemq: the pull batch limits raised to the server's `max` cap so a
# catch-up consumer can ask for 1,000 messages per call, as the peers' clients do.
TIDEMQ_BENCH_TOML = """\
[store]
# One pull may return up to 1,024 messages / 4 MiB, like a 1,000-entry XREAD COUNT or a fetch(1000).
max_transfer_count_on_message_in_memory = 1024
max_transfer_bytes_on_message_in_memory = 4194304
max_transfer_count_on_message_in_disk = 1024
max_transfer_bytes_on_message_in_disk = 4194304
"""


class Unavailable(Exception):
    """Raised when a peer cannot run here (binary missing and not installable, or it failed to start)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free when asked (the peer binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in SYSTEM_BIN_DIRS:
        candidate = Path(d) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def apt_install(package: str, log: list[str]) -> str | None:
    """Install one Debian package; returns None on success, else why it failed."""
    if shutil.which("apt-get") is None:
        return "apt-get is not available"
    if os.geteuid() != 0:
        return "not root, cannot apt-get install"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", package]):
        log.append(" ".join(argv))
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return f"{' '.join(argv)} took more than {APT_TIMEOUT_S} s"
        if done.returncode != 0:
            return f"{' '.join(argv)} failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}"
    return None


def tcp_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


class Peer:
    """One server process of a system under test."""

    system = ""  # the system's short name in tables: tidemq, nats, redis
    binary = ""  # executable looked up on PATH (empty: runs under this Python)
    package = ""  # Debian package that ships the binary

    def __init__(self, label: str) -> None:
        self.label = label  # this configuration's name in the report, e.g. "redis (appendfsync always)"
        self.port = 0
        self.command: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.binary_path: str | None = None

    # Availability ---------------------------------------------------------------------

    def ensure_available(self, allow_install: bool, log: list[str]) -> None:
        """Find (or apt-install) the binary; raises Unavailable with the reason."""
        if not self.binary:
            return
        self.binary_path = find_binary(self.binary)
        if self.binary_path:
            return
        if not allow_install:
            raise Unavailable(f"{self.binary} not found and installing is off (--no-install)")
        problem = apt_install(self.package, log)
        self.binary_path = find_binary(self.binary)
        if self.binary_path is None:
            raise Unavailable(f"{self.binary} not found and apt could not install {self.package}: {problem or 'binary still missing'}")

    def version(self) -> str:
        raise NotImplementedError

    # Lifecycle ------------------------------------------------------------------------

    def argv(self, data_dir: Path) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self, workdir: Path) -> None:
        data_dir = workdir / re.sub(r"[^A-Za-z0-9]+", "_", self.label).strip("_")
        data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.command = self.argv(data_dir)
        self.log_path = data_dir / "server.log"
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen(self.command, stdout=log_file, stderr=subprocess.STDOUT, cwd=data_dir, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.ready():
                return
            time.sleep(PROBE_INTERVAL_S)
        code = self.proc.poll()
        tail = self.log_tail()
        self.stop()
        if code is not None:
            raise Unavailable(f"{self.label} exited with status {code} before it was ready: {tail}")
        raise Unavailable(f"{self.label} did not become ready within {START_TIMEOUT_S} s: {tail}")

    def start_or_reason(self, workdir: Path) -> str | None:
        """Find (or apt-install) the binary and start: None, or why the peer cannot run."""
        try:
            self.ensure_available(True, [])
            self.start(workdir)
        except Unavailable as exc:
            return str(exc)
        return None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT_S)

    @contextlib.contextmanager
    def running(self, workdir: Path) -> Iterator[Peer]:
        self.start(workdir)
        try:
            yield self
        finally:
            self.stop()

    def log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        lines = self.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        return " | ".join(lines) or "(empty log)"


class TidemqPeer(Peer):
    system = "tidemq"

    def __init__(self, flush: str) -> None:
        assert flush in ("async", "sync")
        super().__init__(f"tidemq ({'SYNC_FLUSH' if flush == 'sync' else 'ASYNC_FLUSH'})")
        self.flush = flush

    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        try:
            return f"tidemq {dist_version('tidemq')} (Python {sys.version.split()[0]})"
        except PackageNotFoundError:
            return "tidemq (not installed as a distribution)"

    def argv(self, data_dir: Path) -> list[str]:
        config = data_dir / "bench.toml"
        config.write_text(TIDEMQ_BENCH_TOML)
        return [
            sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(self.port),
            "--store", str(data_dir / "store"), "--flush", self.flush, "--config", str(config), "--log-level", "warning",
        ]  # fmt: skip

    def ready(self) -> bool:
        import httpx

        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False


class NatsPeer(Peer):
    system = "nats"
    binary = "nats-server"
    package = "nats-server"

    def __init__(self, durable: bool = False) -> None:
        # The same server either way: JetStream's default fsyncs every 2 minutes, not per message.
        super().__init__("nats (JetStream file, default sync)" if durable else "nats (JetStream file)")

    def version(self) -> str:
        assert self.binary_path
        out = subprocess.run([self.binary_path, "--version"], capture_output=True, text=True, timeout=10, check=False)
        return (out.stdout or out.stderr).strip()

    def argv(self, data_dir: Path) -> list[str]:
        assert self.binary_path
        return [self.binary_path, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(data_dir / "js")]

    def ready(self) -> bool:
        return tcp_open(self.port)


class RedisPeer(Peer):
    system = "redis"
    binary = "redis-server"
    package = "redis-server"

    def __init__(self, appendfsync: str) -> None:
        assert appendfsync in ("everysec", "always")
        super().__init__(f"redis (appendfsync {appendfsync})")
        self.appendfsync = appendfsync

    def version(self) -> str:
        assert self.binary_path
        out = subprocess.run([self.binary_path, "--version"], capture_output=True, text=True, timeout=10, check=False)
        return out.stdout.strip()

    def argv(self, data_dir: Path) -> list[str]:
        assert self.binary_path
        return [
            self.binary_path, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(data_dir),
            "--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "", "--daemonize", "no",
        ]  # fmt: skip

    def ready(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False
