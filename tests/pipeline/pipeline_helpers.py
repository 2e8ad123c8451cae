"""Helpers of the pipeline tests: commitlog files built byte by byte, and a real tidemq server.

`start_server` runs `python -m app serve` on a free loopback port over a tmp store with
small commitlog files and waits for /readyz; `stop_server` always ends it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from store.codec.message import encode_properties
from store.codec.message_codec import END_FILE_MIN_BLANK_LENGTH, encode_message, write_blank_into
from tests.loopback import bound_port, wait_until_serving

SERVER_START_TIMEOUT_S = 60.0  # the server imports FastAPI and loads the store before /readyz answers 200
SERVER_STOP_TIMEOUT_S = 15.0
# Small commitlog files so tests span several; the largest message must fit one file with its end marker.
STORE_TOML = "[store]\nmapped_file_size_commit_log_bytes = 1048576\nmax_message_size_bytes = 524288\n"


@dataclass
class Written:
    """A message written into hand-built commitlog files, with where it landed."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    body: bytes
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int


def build_commitlog(directory: Path, file_size: int, messages: list[tuple[str, int, bytes, dict[str, str]]]) -> list[Written]:
    """Write (topic, queue_id, body, properties) messages as the store lays them out: files of
    `file_size` bytes named by their start offset, a blank end marker where the next message
    (plus 8 bytes) does not fit, zeros after the last message."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Written] = []
    next_queue_offset: dict[tuple[str, int], int] = {}
    file_start, buf, pos = 0, bytearray(file_size), 0
    for i, (topic, qid, body, props) in enumerate(messages):
        queue_offset = next_queue_offset.get((topic, qid), 0)
        born, stored = 1_700_000_000_000 + i, 1_700_000_000_000 + i + 5
        raw = encode_message(
            topic.encode(), body, encode_properties(props), queue_id=qid, queue_offset=queue_offset,
            physical_offset=file_start + pos, born_timestamp=born, store_timestamp=stored,
        )  # fmt: skip
        if pos + len(raw) + END_FILE_MIN_BLANK_LENGTH > file_size:
            write_blank_into(buf, pos, file_size - pos)
            (directory / f"{file_start:020d}").write_bytes(bytes(buf))
            file_start, buf, pos = file_start + file_size, bytearray(file_size), 0
            raw = encode_message(
                topic.encode(), body, encode_properties(props), queue_id=qid, queue_offset=queue_offset,
                physical_offset=file_start, born_timestamp=born, store_timestamp=stored,
            )  # fmt: skip
        buf[pos : pos + len(raw)] = raw
        written.append(Written(topic, qid, queue_offset, file_start + pos, body, props, born, stored))
        next_queue_offset[(topic, qid)] = queue_offset + 1
        pos += len(raw)
    (directory / f"{file_start:020d}").write_bytes(bytes(buf))
    return written


@dataclass
class Server:
    url: str
    store_dir: Path
    process: subprocess.Popen[bytes]


def start_server(tmp: Path, broker_lines: tuple[str, ...] = ()) -> Server:
    """A tidemq server on a free loopback port over a store in `tmp`; stop it with `stop_server`."""
    store_dir = tmp / "store"
    config = tmp / "tidemq.toml"
    config.write_text("[broker]\n" + "".join(line + "\n" for line in broker_lines) + STORE_TOML)
    with open(tmp / "server.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", "0", "--store", str(store_dir), "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        port = bound_port(tmp / "server.log", 0, process, SERVER_START_TIMEOUT_S)
    except RuntimeError:
        process.kill()
        process.wait(10)
        raise
    url = f"http://127.0.0.1:{port}"
    server = Server(url, store_dir, process)

    def ended() -> str | None:
        return None if process.poll() is None else f"tidemq server exited with {process.returncode}"

    try:
        with httpx.Client(base_url=url, timeout=1.0) as client:
            wait_until_serving(client, ended, SERVER_START_TIMEOUT_S, 0.1, degraded_ok=False)
    except RuntimeError as e:
        stop_server(server)
        raise RuntimeError(f"{e}: {(tmp / 'server.log').read_text()[-2000:]}") from None
    return server


def stop_server(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(SERVER_STOP_TIMEOUT_S)


def create_topic(url: str, topic: str, queues: int, perm: str = "rw") -> None:
    response = httpx.put(f"{url}/v1/topics/{topic}", json={"queues": queues, "perm": perm}, timeout=30)
    assert response.status_code in (200, 201), response.text


def produce(url: str, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send messages with the JSON produce API (straight over HTTP, not through the pipeline's client)."""
    results: list[dict[str, Any]] = []
    for i in range(0, len(messages), 1000):
        response = httpx.post(f"{url}/v1/topics/{topic}/messages", json={"messages": messages[i : i + 1000]}, timeout=60)
        assert response.status_code == 201, response.text
        results.extend(response.json()["results"])
    return results


def queue_max_offsets(url: str, topic: str) -> dict[int, int]:
    response = httpx.get(f"{url}/v1/topics/{topic}", timeout=30)
    assert response.status_code == 200, response.text
    return {q["queue_id"]: q["max_offset"] for q in response.json()["queues"]}
