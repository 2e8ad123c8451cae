"""A real etcd server (Debian's etcd-server package) on free loopback ports with a temporary data directory."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import httpx

from tests.loopback import free_port
from tests.waiting import wait_for

ETCD = shutil.which("etcd")
START_TIMEOUT_S = 20.0


class EtcdServer:
    def __init__(self, root: Path) -> None:
        assert ETCD is not None
        self.data_dir = root / "etcd-data"
        self.log_path = root / "etcd.log"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> EtcdServer:
        peer = f"http://127.0.0.1:{self.peer_port}"
        cmd = [
            str(ETCD),
            "--name", "test",
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.url,
            "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"test={peer}",
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {proc.returncode}:\n{self.log_path.read_text()[-4000:]}")
            try:
                health: object = httpx.get(self.url + "/health", timeout=1.0).json().get("health")
                return health == "true"
            except (httpx.HTTPError, ValueError):
                return False

        try:
            wait_for(healthy, START_TIMEOUT_S, what="etcd to be healthy", poll_s=0.05)
        except AssertionError:
            self.kill()
            raise
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
