"""A cluster on one machine (`make cluster`): etcd and broker groups of brokers, each a process on loopback.

    python -m cluster.local_cluster ./data-cluster [--groups 2] [--brokers 2] [--base-port 8180]

etcd (Debian's `etcd-server`) listens on `base-port + 90` (clients) and `base-port + 91` (peers)
with its data in `DIR/etcd`; broker j of group i serves HTTP on `base-port + 10 i + j` and HA on
`base-port + 10 i + j + 5`, with its store in `DIR/b{i+1}-{j+1}`, all SYNC_MASTER groups named
b1, b2, ... of the cluster "local", with 64 MiB commitlog files. The brokers of a group start one after another, so the
first one started is its first master. SIGINT or SIGTERM stops the brokers (masters resign), then
etcd. bench/cluster_bench.py uses the same class.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

START_TIMEOUT_S = 60.0
# 64 MiB commitlog files instead of 1 GiB: four brokers on one disk preallocate two files each.
LOCAL_STORE = """
[store]
mapped_file_size_commit_log_bytes = 67108864
"""
# Short leases so a failover takes seconds (the defaults are 5 s): renewals every 300 ms, fenced
# 500 ms before the TTL; a slave 1.5 s behind leaves the in-sync set. For the cluster tests and
# bench/cluster_bench.py (its config_text).
FAST_FAILOVER = """
[cluster]
lease_ttl_s = 2
lease_renew_interval_ms = 300
fence_margin_ms = 500
refresh_interval_ms = 100
etcd_request_timeout_ms = 500
in_sync_lag_max_ms = 1500
"""
STOP_TIMEOUT_S = 20.0
CLUSTER_NAME = "local"


class LocalCluster:
    def __init__(self, root: Path, groups: int, brokers: int, base_port: int, config_text: str = "", replication: str = "sync") -> None:
        self.root = root
        self.groups = groups
        self.brokers = brokers
        self.base_port = base_port
        self.config_text = config_text
        self.replication = replication
        self.etcd_url = f"http://127.0.0.1:{base_port + 90}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def broker_url(self, group: int, index: int) -> str:
        return f"http://127.0.0.1:{self.base_port + 10 * group + index}"

    def urls(self) -> list[str]:
        """Every broker's HTTP URL, group by group."""
        return [self.broker_url(g, i) for g in range(self.groups) for i in range(self.brokers)]

    def broker_name(self, group: int, index: int) -> str:
        return f"b{group + 1}-{index + 1}"

    def start(self) -> None:
        etcd = shutil.which("etcd")
        if etcd is None:
            raise SystemExit("etcd is not installed (Debian: apt-get install etcd-server)")
        self.root.mkdir(parents=True, exist_ok=True)
        peer = f"http://127.0.0.1:{self.base_port + 91}"
        etcd_cmd = [etcd, "--name", "local", "--data-dir", str(self.root / "etcd"), "--listen-client-urls", self.etcd_url]
        etcd_cmd += ["--advertise-client-urls", self.etcd_url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
        etcd_cmd += ["--initial-cluster", f"local={peer}"]
        self._spawn("etcd", etcd_cmd)
        self._wait(lambda: httpx.get(self.etcd_url + "/health", timeout=1.0).json().get("health") == "true", "etcd")
        config = self.root / "broker.toml"
        config.write_text(LOCAL_STORE + self.config_text)
        for g in range(self.groups):
            for j in range(self.brokers):
                self.start_broker(g, j)

    def start_broker(self, group: int, index: int) -> None:
        name, url = self.broker_name(group, index), self.broker_url(group, index)
        port = self.base_port + 10 * group + index
        cmd = [sys.executable, "-m", "app", "serve", "--port", str(port), "--store", str(self.root / name)]
        cmd += ["--config", str(self.root / "broker.toml"), "--cluster-etcd", self.etcd_url, "--cluster-name", CLUSTER_NAME]
        cmd += ["--broker-name", f"b{group + 1}", "--ha-port", str(port + 5), "--replication", self.replication]
        cmd += ["--advertised-http-address", url]
        self._spawn(name, cmd)
        self._wait(lambda: httpx.get(url + "/readyz", timeout=1.0).status_code == 200, name)

    def _spawn(self, name: str, cmd: list[str]) -> None:
        with open(self.root / f"{name}.log", "ab") as log:  # the child has its own descriptor
            self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[1])

    def _wait(self, ready: Callable[[], object], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            proc = self.procs.get(what)
            if proc is not None and proc.poll() is not None:
                raise SystemExit(f"{what} exited with {proc.returncode}; see {self.root / (what + '.log')}")
            try:
                if ready():
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.1)
        raise SystemExit(f"{what} did not start within {START_TIMEOUT_S:.0f} s; see {self.root / (what + '.log')}")

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)

    def stop(self) -> None:
        """The brokers first (SIGTERM: masters resign), then etcd."""
        names = [n for n in self.procs if n != "etcd"] + (["etcd"] if "etcd" in self.procs else [])
        for name in names:
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(STOP_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.local_cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="directory of etcd's data, the stores and the logs")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--brokers", type=int, default=2, help="brokers per group")
    parser.add_argument("--base-port", type=int, default=8180)
    args = parser.parse_args(argv)
    cluster = LocalCluster(Path(args.root), args.groups, args.brokers, args.base_port)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        cluster.start()
        print(f"etcd {cluster.etcd_url}")
        for g in range(args.groups):
            urls = ", ".join(cluster.broker_url(g, j) for j in range(args.brokers))
            print(f"broker group b{g + 1}: {urls}")
        print(f"logs and stores in {os.path.abspath(args.root)}; Ctrl-C stops the cluster", flush=True)
        while not stopping:
            time.sleep(0.2)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
