"""How many consume-queue entries one tag-filtered get should examine, for HTTP pulls.

A queue holds BACKLOG messages of another tag, then one of the tag asked for. For each scan window
(`max_filter_message_size_bytes`: RocketMQ's 16,000 bytes = 800 entries, and larger ones) it measures

- in process: one get over a window of non-matching entries (the time a pull holds its thread, or
  the event loop when a held pull re-reads inline), and the gets a sweep of the backlog takes;
- over HTTP, a broker process per window on the same store: the sweep as a consumer does it
  (pulls with wait_ms=0 from next_offset until FOUND), and one held pull (wait_ms) from offset 0,
  which re-reads inline until it reaches the match.

Usage: python bench/tag_filter_scan_bench.py [--backlog N] [--windows B1,B2,...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from store import DefaultMessageStore, GetMessageStatus, MessageStoreConfig, TagFilter, build_message
from tests.loopback import free_port

TOPIC = "Scan"
BATCH = 1_000


# Small commitlog files, not prefaulted: the bench writes tens of MiB, not a GiB file.
STORE_SETTINGS = {"mapped_file_size_commit_log_bytes": 64 << 20, "prefault_mapped_file_enable": False, "message_index_enable": False}


def store_config(root: str, window_bytes: int) -> MessageStoreConfig:
    return MessageStoreConfig.from_dict({"store_path_root_dir": root, "max_filter_message_size_bytes": window_bytes, **STORE_SETTINGS})


def fill(root: str, backlog: int) -> None:
    store = DefaultMessageStore(store_config(root, 16_000))
    store.load()
    store.start()
    store.topic_config_manager.create_or_update(TOPIC, 1)
    for start in range(0, backlog, BATCH):
        msgs = [build_message(TOPIC, b"x" * 100, 0, tags="Other") for _ in range(min(BATCH, backlog - start))]
        assert store.put_messages(msgs).ok
    assert store.put_message(build_message(TOPIC, b"wanted", 0, tags="Wanted")).ok
    while store.reput_service.behind():
        time.sleep(0.01)
    store.shutdown()


def in_process(root: str, window_bytes: int) -> tuple[float, int, float]:
    """(ms of one get over a full window, gets to sweep the backlog, ms of the sweep)."""
    store = DefaultMessageStore(store_config(root, window_bytes))
    store.load()
    store.start()
    try:
        wanted = TagFilter.parse("Wanted")
        one = []
        for _ in range(20):
            started = time.perf_counter()
            with store.get_message("g", TOPIC, 0, 0, 32, wanted) as r:
                assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE
            one.append(time.perf_counter() - started)
        started, offset, gets = time.perf_counter(), 0, 0
        while True:
            gets += 1
            with store.get_message("g", TOPIC, 0, offset, 32, wanted) as r:
                if r.status is GetMessageStatus.FOUND:
                    break
                offset = r.next_begin_offset
        return min(one) * 1000, gets, (time.perf_counter() - started) * 1000
    finally:
        store.shutdown()


def over_http(root: str, window_bytes: int) -> tuple[int, float, float]:
    """(pulls to sweep the backlog, ms of the sweep with wait_ms=0, ms of one held pull from 0)."""
    config = os.path.join(os.path.dirname(root), "bench.toml")
    with open(config, "w") as f:
        f.write(f"[store]\nmax_filter_message_size_bytes = {window_bytes}\n")
        f.writelines(f"{k} = {str(v).lower()}\n" for k, v in STORE_SETTINGS.items())
    port = free_port()
    cmd = [sys.executable, "-m", "app", "serve", "--port", str(port), "--store", root, "--config", config]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if c.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "broker not ready"
                time.sleep(0.05)
            url = f"/v1/topics/{TOPIC}/queues/0/messages"
            c.get(url, params={"offset": 0, "tag": "Wanted"})  # warm up the connection and the files
            started, offset, pulls = time.perf_counter(), 0, 0
            while True:
                pulls += 1
                reply = c.get(url, params={"offset": offset, "tag": "Wanted"}).json()
                if reply["status"] == "FOUND":
                    break
                offset = reply["next_offset"]
            sweep_ms = (time.perf_counter() - started) * 1000
            started = time.perf_counter()
            held = c.get(url, params={"offset": 0, "tag": "Wanted", "wait_ms": 30_000}).json()
            held_ms = (time.perf_counter() - started) * 1000
            assert held["status"] == "FOUND", held["status"]
            return pulls, sweep_ms, held_ms
    finally:
        proc.terminate()
        proc.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--windows", default="16000,80000,320000,1280000")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="tidemq-scan-bench-")
    try:
        root = os.path.join(tmp, "store")
        fill(root, args.backlog)
        print(f"backlog: {args.backlog:,} messages of another tag, then one match\n")
        print("| window bytes | entries | one get ms | gets to sweep | sweep ms | HTTP pulls | HTTP sweep ms | held pull ms |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for window in (int(w) for w in args.windows.split(",")):
            one_ms, gets, sweep_ms = in_process(root, window)
            pulls, http_ms, held_ms = over_http(root, window)
            print(
                f"| {window:,} | {window // 20:,} | {one_ms:.3f} | {gets:,} | {sweep_ms:.1f} | {pulls:,} | {http_ms:.1f} | {held_ms:.1f} |"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
