"""Test helpers: broker processes (`python -m app serve`) with replication roles, and a TCP proxy that injects network faults."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from store.layouts import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE
from tests.app.conftest import SMALL_STORE as APP_SMALL_STORE
from tests.loopback import bound_port, wait_until_serving
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
NODE_COMMAND = [sys.executable, "-m", "app", "serve"]
# Small files so replication crosses commitlog file boundaries; short HA intervals so faults show quickly.
SMALL_STORE = (
    APP_SMALL_STORE
    + """ha_send_heartbeat_interval_ms = 300
ha_housekeeping_interval_ms = 2000
ha_transfer_batch_size_bytes = 8192
sync_flush_timeout_ms = 1500
"""
)
SMALL_BROKER = """
[broker]
max_wait_ms = 5000
max_pull_messages = 256
"""
START_TIMEOUT_S = 30.0


class Node:
    """One broker process (master or slave) over its own store directory, restartable on the same ports."""

    ha_port: int  # set by Nodes.add: the master's HA port (0 on a slave, and on a master until `--ha-port 0` bound one)

    def __init__(
        self,
        root: Path,
        name: str,
        args: list[str],
        config_text: str = SMALL_STORE + SMALL_BROKER,
        client_options: dict[str, Any] | None = None,
    ) -> None:
        self.store_dir = root / name
        self.config_path = root / f"{name}.toml"
        self.config_path.write_text(config_text)
        self.log_path = root / f"{name}.log"
        self.args = args
        # 0 until the first start binds a port (`--port 0`); a restart binds the same one again, so the
        # node keeps its address (a cluster broker's id).
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        # With TLS options ({"verify": an SSLContext}) the node is spoken to over HTTPS.
        self.scheme = "https" if client_options else "http"
        self.client_options = client_options or {}
        self.client = httpx.Client(timeout=15.0)  # replaced by one with the node's address at its first start
        self.topics_made: set[str] = set()  # topics this node created (produce creates a topic first)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self, wait_ready: bool = True) -> Node:
        cmd = [*NODE_COMMAND, "--port", str(self.port), "--store", str(self.store_dir), "--config", str(self.config_path), *self.args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        if self.port == 0:
            try:
                self.port = bound_port(self.log_path, log_from, self.proc, START_TIMEOUT_S)
            except RuntimeError:
                self.kill()
                raise
            self.client.close()
            self.client = httpx.Client(base_url=self.url, timeout=15.0, **self.client_options)
        if wait_ready:
            self.wait_ready()
            self._learn_ha_port()
        return self

    def _learn_ha_port(self) -> None:
        """A master started with `--ha-port 0` listens on a port the kernel picked: remembered, and put in its
        arguments so a restart listens there again (its slaves' address). No port is picked before the start,
        where another process could take it first."""
        args = self.args
        if "--role" not in args or args[args.index("--role") + 1] != "master" or args[args.index("--ha-port") + 1] != "0":
            return
        self.ha_port = int(str(self.ha()["ha_address"]).rsplit(":", 1)[1])
        args[args.index("--ha-port") + 1] = str(self.ha_port)

    def wait_ready(self) -> None:
        proc = self.proc
        assert proc is not None

        def ended() -> str | None:
            return None if proc.poll() is None else f"node exited with {proc.returncode}"

        try:
            wait_until_serving(self.client, ended, START_TIMEOUT_S, 0.05, degraded_ok=False)
        except RuntimeError as e:
            self.kill()
            raise RuntimeError(f"{e}:\n{self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-8000:] if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"node did not stop within {timeout_s}s:\n{self.log()}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        self.client.close()

    # Reading the node ------------------------------------------------------------------

    def ha(self) -> dict[str, Any]:
        ha: dict[str, Any] = self.client.get("/v1/store").json()["ha"]
        return ha

    def max_offset(self) -> int:
        return int(self.client.get("/v1/store").json()["runtime"]["commitlog_max_offset"])

    def max_offset_on_disk(self) -> int:
        """Where the stopped node's commitlog ends: past its last whole message (read from the files)."""
        assert self.proc is None or self.proc.poll() is not None, "the node must be stopped"
        directory = self.store_dir / "commitlog"
        end = 0
        for path in sorted(directory.iterdir()):
            data = path.read_bytes()
            base, pos = int(path.name), 0
            while pos + 8 <= len(data):
                size, magic = struct.unpack_from(">iI", data, pos)
                if size <= 0 or pos + size > len(data) or magic not in (MESSAGE_MAGIC_CODE, BLANK_MAGIC_CODE):
                    break
                pos += size
                if magic == MESSAGE_MAGIC_CODE:
                    end = base + pos
        return end

    def produce(self, topic: str, body: str, queue_id: int = 0) -> httpx.Response:
        """Produce one message; the first produce of a topic on this node creates it first (the default 4 queues; a PUT
        without a queue count changes no existing topic), as topics are created explicitly (a slave refuses the
        creation as it refuses the produce)."""
        if topic not in self.topics_made:
            if self.client.put(f"/v1/topics/{topic}", json={}).status_code in (200, 201):
                self.topics_made.add(topic)
        return self.client.post(f"/v1/topics/{topic}/messages", json={"body": body, "queue_id": queue_id})

    def pull_all(self, topic: str, queue_id: int, count: int, timeout_s: float = 15.0) -> list[str]:
        """Bodies of queue offsets [0, count), waiting until they are all readable here."""
        bodies: list[str] = []

        def read_more() -> bool:
            r = self.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": len(bodies), "max": 256})
            if r.status_code == 200:
                bodies.extend(message["body"] for message in r.json()["messages"])
            return len(bodies) >= count

        wait_for(read_more, timeout_s, what=lambda: f"{count} messages readable on {self.url}: only {len(bodies)}", poll_s=0.05)
        return bodies


def caught_up(master: Node, slave: Node) -> bool:
    """True when `slave` holds exactly `master`'s log now: the same end, nothing left to send. A master
    writes state records of its own (snapshots, progress), so this is waited for, not compared once."""
    return slave.max_offset() == master.max_offset() and slave.ha()["bytes_behind"] == 0


class Nodes:
    """The nodes a fixture made (`ha_port` set on each), all closed when its `with` ends."""

    def __init__(self) -> None:
        self.made: list[Node] = []

    def add(self, node: Node, ha_port: int, start: bool) -> Node:
        node.ha_port = ha_port
        self.made.append(node)
        return node.start() if start else node

    def __enter__(self) -> Nodes:
        return self

    def __exit__(self, *exc: object) -> None:
        for node in self.made:
            node.close()


class FaultProxy:
    """A loopback TCP proxy (slave -> proxy -> master) that can pause traffic or cut a connection mid-frame."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.paused = threading.Event()
        # Upstream local ports (the master's view of a slave's address) of the connections held back one by one.
        self.paused_ports: set[int] = set()
        self.cut_after_bytes: int | None = None  # master->slave bytes after which the next connection is cut
        self.cuts = 0
        self.connections = 0
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._server.settimeout(0.1)
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._spawn(self._accept_loop)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                client.close()
                continue
            self.connections += 1
            for s in (client, upstream):
                s.settimeout(0.1)
            with self._lock:
                self._socks += [client, upstream]
            pair: dict[str, Any] = {"done": False, "port": upstream.getsockname()[1]}
            self._spawn(self._pump, client, upstream, pair, False)
            self._spawn(self._pump, upstream, client, pair, True)

    def pause_peer(self, upstream_port: int) -> None:
        """Hold back both directions of the one connection whose upstream socket has this local port."""
        self.paused_ports.add(upstream_port)

    def resume_peers(self) -> None:
        self.paused_ports.clear()

    def _held(self, pair: dict[str, Any]) -> bool:
        return self.paused.is_set() or pair["port"] in self.paused_ports

    def _pump(self, src: socket.socket, dst: socket.socket, pair: dict[str, Any], downstream: bool) -> None:
        forwarded = 0
        try:
            while not self._stop.is_set() and not pair["done"]:
                if self._held(pair):
                    time.sleep(0.01)  # held back for as long as the test pauses this connection
                    continue
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                while self._held(pair) and not self._stop.is_set():
                    time.sleep(0.01)  # bytes read just before the pause are held until it ends
                limit = self.cut_after_bytes
                if downstream and limit is not None and forwarded + len(data) >= limit:
                    dst.sendall(data[: max(0, limit - forwarded)])
                    self.cut_after_bytes = None
                    self.cuts += 1
                    break
                dst.sendall(data)
                forwarded += len(data)
        except OSError:
            pass
        finally:
            pair["done"] = True
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        with self._lock:
            for s in self._socks:
                try:
                    s.close()
                except OSError:
                    pass
        for t in self._threads:
            t.join(2)
