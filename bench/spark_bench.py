"""Rows/s of the `tidemq` HTTP batch source beside the `tidemq-store` offline reader, over one store, in one run.

    make bench-spark                      # 1,000,000 messages of 1 KiB in 4 queues
    python bench/spark_bench.py --messages 100000

The store is written straight through DefaultMessageStore (the write path is not what is
measured), then a tidemq server is started over it. Both readers run on one local[2]
SparkSession and are timed over the whole topic into Spark's `noop` sink (every row
decoded and handed to Spark, nothing written), after a small warm-up query that pays the
first-query cost of the Python workers. The figure that matters is the ratio
http / offline (target >= 0.5), not the absolute rates, which depend on the machine.

The broker runs with its pull transfer limits raised to max_pull_messages (1,024 messages,
4 MiB per pull) instead of the store's defaults for small interactive pulls (32 messages);
`--default-transfer-limits` measures with the defaults.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx
import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from store import DefaultMessageStore, MessageStoreConfig, build_message  # noqa: E402

TOPIC = "bench"
COMMITLOG_FILE_BYTES = 256 * 1024 * 1024  # one offline partition per file
PUT_BATCH = 1000  # messages per put_messages call while filling the store
SERVER_READY_TIMEOUT_S = 120.0  # loading and recovering a store of ~1 GiB


def fill_store(root: str, messages: int, body_bytes: int, queues: int) -> None:
    config = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log_bytes=COMMITLOG_FILE_BYTES)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    try:
        store.topic_config_manager.create_or_update(TOPIC, queues, "rw")
        body = os.urandom(body_bytes)
        for start in range(0, messages, PUT_BATCH):
            count = min(PUT_BATCH, messages - start)
            qid = (start // PUT_BATCH) % queues
            result = store.put_messages([build_message(TOPIC, body, queue_id=qid, tags=f"T{(start + i) % 4}") for i in range(count)])
            assert result.ok, result
        deadline = time.monotonic() + 300  # the reput service builds the consume queues behind the puts
        while sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(queues)) < messages:
            assert time.monotonic() < deadline, "the reput service did not catch up"
            time.sleep(0.1)
    finally:
        store.shutdown()


def start_server(work: str, store_dir: str, default_limits: bool) -> tuple[subprocess.Popen[bytes], str]:
    lines = [f"mapped_file_size_commit_log_bytes = {COMMITLOG_FILE_BYTES}"]
    if not default_limits:
        lines += ["max_transfer_count_on_message_in_memory = 1024", f"max_transfer_bytes_on_message_in_memory = {4 * 1024 * 1024}"]
    config = os.path.join(work, "tidemq.toml")
    with open(config, "w") as f:
        f.write("[store]\n" + "\n".join(lines) + "\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(work, "server.log"), "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--store", store_dir, "--config", config, "--log-level", "warning"],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; see {work}/server.log")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError("server not ready in time")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def timed_rows_per_s(df: Any, expected: int) -> tuple[float, float]:
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - started
    return expected / elapsed, elapsed


def local_session(work: str) -> Any:
    """A local Spark session of two cores with tidemq's sources registered."""
    from pyspark.sql import SparkSession

    from pipeline import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tidemq-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--default-transfer-limits", action="store_true", help="keep the store's pull transfer limits (32 messages)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    work = tempfile.mkdtemp(prefix="tidemq-spark-bench-")
    store_dir = os.path.join(work, "store")
    proc = None
    spark = None
    try:
        t0 = time.perf_counter()
        fill_store(store_dir, args.messages, args.body_bytes, args.queues)
        print(
            f"filled the store: {args.messages} messages of {args.body_bytes} B in {args.queues} queues, {time.perf_counter() - t0:.1f} s"
        )
        proc, url = start_server(work, store_dir, args.default_transfer_limits)
        spark = local_session(work)

        def http() -> Any:  # a new reader each time: DataFrameReader.option changes the reader it is called on
            return spark.read.format("tidemq").option("url", url).option("topic", TOPIC)

        # Warm-up: the first query on a Python source starts the Python workers both sources then share.
        http().option("endingOffsets", orjson.dumps({str(q): 1 for q in range(args.queues)}).decode()).load().collect()
        offline_rate, offline_s = timed_rows_per_s(spark.read.format("tidemq-store").load(store_dir), args.messages)
        http_rate, http_s = timed_rows_per_s(http().load(), args.messages)
        assert http().load().count() == args.messages, "the HTTP source did not read every message"
        assert spark.read.format("tidemq-store").load(store_dir).count() == args.messages, "the offline reader did not read every message"
        ratio = http_rate / offline_rate
        figures = {
            "messages": args.messages,
            "body_bytes": args.body_bytes,
            "queues": args.queues,
            "transfer_limits": "default" if args.default_transfer_limits else "1024 messages / 4 MiB",
            "offline_rows_per_s": round(offline_rate),
            "offline_s": round(offline_s, 2),
            "http_rows_per_s": round(http_rate),
            "http_s": round(http_s, 2),
            "http_over_offline": round(ratio, 3),
            "target": 0.5,
        }
        print(f"broker pull transfer limits: {figures['transfer_limits']}")
        print(f"offline reader (tidemq-store): {offline_rate:,.0f} rows/s ({offline_s:.1f} s)")
        print(f"HTTP source (tidemq):          {http_rate:,.0f} rows/s ({http_s:.1f} s)")
        print(f"HTTP / offline: {ratio:.2f} (target >= 0.5) {'OK' if ratio >= 0.5 else 'BELOW TARGET'}")
        if args.json:
            with open(args.json, "w") as f:
                f.write(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if proc is not None:
            stop_server(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
