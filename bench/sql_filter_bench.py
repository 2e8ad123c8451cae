"""What an SQL92 filter costs a pull: filtered pulls against the unfiltered pull of the same messages.

One queue holds MESSAGES messages (256-byte bodies, a tag and the properties `amount` 0..999 and
`region` eu/us/asia). Each row sweeps the whole queue from offset 0 with max=32 per pull, as a
consumer catching up does, and gives the rate and the CPU per message examined:

- in process (`store.get_message`, the gather kernel; the calling thread's CPU time): no filter
  (the baseline), an SQL filter every message passes (`amount >= 0`: the same messages as the
  baseline, so the ratio is the filter's whole cost), a selective one, a larger one, the tag filter
  of the same selectivity, and for comparison the unfiltered pull followed by the Python reference
  evaluator on each message (what evaluating per message in Python would add);
- over HTTP (a broker process on the same store, one keep-alive connection; the broker's utime +
  stime from /proc): the JSON and the batch format, without and with the filter every message passes,
  and the selective filter in JSON.

Rows of one kind alternate (baseline, filtered, baseline, ...) over a store read once before, so
every run reads page-cached data; each figure is the median of ROUNDS runs. The target: a filter
costs no more than the pull it filters (CPU ratio <= 2.0 with the filter every message passes).

Usage: python bench/sql_filter_bench.py [--quick] [--messages N] [--rounds R]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from urllib.parse import urlencode

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.http_bench import Broker
from store import DefaultMessageStore, GetMessageStatus, MessageFilter, MessageStoreConfig, SqlFilter, TagFilter, build_message
from store.queue.get_message_result import Filter, GetMessageResult, properties_of_stored

TOPIC = "Sql"
BODY = b"x" * 256
FILL_BATCH = 1_000
PULL_MAX = 32
TARGET_CPU_RATIO = 2.0
ALL_PASS = "amount >= 0"
SELECTIVE = "region = 'eu' AND amount > 500"  # 1 message in 6
LARGER = "region IN ('eu', 'us') AND (amount BETWEEN 100 AND 900 OR TAGS = 'paid') AND NOT (region = 'asia') AND amount <> 17"
STORE_SETTINGS = {"mapped_file_size_commit_log_bytes": 64 << 20, "prefault_mapped_file_enable": False, "message_index_enable": False}
BROKER_CONFIG = "[store]\n" + "".join(f"{k} = {str(v).lower()}\n" for k, v in STORE_SETTINGS.items())


def open_store(root: str) -> DefaultMessageStore:
    store = DefaultMessageStore(MessageStoreConfig(store_path_root_dir=root, **STORE_SETTINGS))  # type: ignore[arg-type]  # bench settings
    store.load()
    store.start()
    return store


def fill(root: str, messages: int) -> None:
    store = open_store(root)
    store.topic_config_manager.create_or_update(TOPIC, 1)
    regions = ("eu", "us", "asia")
    for start in range(0, messages, FILL_BATCH):
        batch = [
            build_message(TOPIC, BODY, 0, tags="paid" if i % 2 else "created", properties={"amount": str(i % 1000), "region": regions[i % 3]})
            for i in range(start, min(messages, start + FILL_BATCH))
        ]  # fmt: skip
        assert store.put_messages(batch).ok
    while store.reput_service.behind():
        time.sleep(0.01)
    store.shutdown()


def sweep(
    store: DefaultMessageStore, message_filter: Filter | None, after: Callable[[GetMessageResult], None] | None = None
) -> tuple[int, int]:
    """Read the queue from 0 to its end; (entries examined, messages returned)."""
    offset = returned = 0
    while True:
        with store.get_message("bench", TOPIC, 0, offset, PULL_MAX, message_filter) as r:
            if r.status not in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE):
                return offset, returned
            returned += r.message_count
            if after is not None:
                after(r)
            offset = r.next_begin_offset


def measured(run: Callable[[], tuple[int, int]]) -> tuple[float, float, int, int]:
    """(wall s, CPU s of this thread, examined, returned) of one run."""
    wall, cpu = time.perf_counter(), time.thread_time()
    examined, returned = run()
    return time.perf_counter() - wall, time.thread_time() - cpu, examined, returned


def in_process(root: str, rounds: int) -> list[tuple[str, float, float, int]]:
    """(row, messages examined per s, CPU us per message examined, returned per sweep), medians."""
    store = open_store(root)
    try:
        reference = SqlFilter.parse(ALL_PASS)

        def python_evaluation(r: GetMessageResult) -> None:  # the reference evaluator on each returned message
            data = memoryview(r.data)
            passed = sum(reference.matches(properties_of_stored(data[pos : pos + size])) for pos, size in r.positions())
            assert passed == r.message_count

        rows: dict[str, Callable[[], tuple[int, int]]] = {
            "no filter (baseline)": lambda: sweep(store, None),
            f"sql {ALL_PASS} (every message passes)": lambda: sweep(store, MessageFilter(None, SqlFilter.parse(ALL_PASS))),
            f"sql {SELECTIVE}": lambda: sweep(store, MessageFilter(None, SqlFilter.parse(SELECTIVE))),
            "sql, larger (6 conditions)": lambda: sweep(store, MessageFilter(None, SqlFilter.parse(LARGER))),
            "tag paid (hash, then exact tag)": lambda: sweep(store, TagFilter.parse("paid")),
            "no filter + Python evaluator per message": lambda: sweep(store, None, python_evaluation),
        }
        sweep(store, None)  # read once: every row reads page-cached data
        samples: dict[str, list[tuple[float, float, int, int]]] = {name: [] for name in rows}
        for _ in range(rounds):
            for name, run in rows.items():
                samples[name].append(measured(run))
        return [summary(name, runs) for name, runs in samples.items()]
    finally:
        store.shutdown()


def window_get(root: str) -> tuple[int, float, float]:
    """(entries, ms, CPU ms) of one get over a full scan window that no message passes: how long a
    selective filter holds a read thread, against about 0.05 ms for a tag filter (docs/benchmarks.md)."""
    store = open_store(root)
    try:
        nothing = MessageFilter(None, SqlFilter.parse("region = 'mars'"))
        runs = []
        for _ in range(10):
            wall, cpu = time.perf_counter(), time.thread_time()
            with store.get_message("bench", TOPIC, 0, 0, PULL_MAX, nothing) as r:
                assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE
                entries = r.next_begin_offset
            runs.append((time.perf_counter() - wall, time.thread_time() - cpu))
        return entries, min(r[0] for r in runs) * 1000, min(r[1] for r in runs) * 1000
    finally:
        store.shutdown()


def summary(name: str, runs: list[tuple[float, float, int, int]]) -> tuple[str, float, float, int]:
    examined, returned = runs[0][2], runs[0][3]
    assert all(r[2] == examined and r[3] == returned for r in runs), name
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    return name, examined / wall, cpu / examined * 1e6, returned


def cpu_seconds(pid: int) -> float:
    """CPU seconds the live threads of a process have run so far, to the nanosecond (/proc/PID/task/*/schedstat):
    a quick run's sweeps take a few clock ticks, the resolution of /proc/PID/stat, and some none."""
    total_ns = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total_ns += int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return total_ns / 1e9


def http_sweep(conn: http.client.HTTPConnection, path: str, params: dict[str, str]) -> tuple[int, int]:
    offset = returned = 0
    while True:
        conn.request("GET", f"{path}?{urlencode({**params, 'offset': offset, 'max': PULL_MAX})}")
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, body[:200]
        if path.endswith("/batch"):
            status, count, next_offset = response.headers["X-Tidemq-Status"], int(response.headers["X-Tidemq-Count"]), int(
                response.headers["X-Tidemq-Next-Offset"]
            )  # fmt: skip
        else:
            doc = orjson.loads(body)
            status, count, next_offset = doc["status"], len(doc["messages"]), doc["next_offset"]
        if status not in ("FOUND", "NO_MATCHED_MSG"):
            return offset, returned
        returned += count
        offset = next_offset


def over_http(root: str, rounds: int) -> list[tuple[str, float, float, int]]:
    broker = Broker(root, BROKER_CONFIG)
    conn = http.client.HTTPConnection("127.0.0.1", broker.port, timeout=60)
    try:
        json_path = f"/v1/topics/{TOPIC}/queues/0/messages"
        rows = {
            "JSON, no filter (baseline)": (json_path, {}),
            f"JSON, sql {ALL_PASS}": (json_path, {"sql": ALL_PASS}),
            f"JSON, sql {SELECTIVE}": (json_path, {"sql": SELECTIVE}),
            "batch format, no filter (baseline)": (json_path + "/batch", {}),
            f"batch format, sql {ALL_PASS}": (json_path + "/batch", {"sql": ALL_PASS}),
        }
        http_sweep(conn, json_path, {})  # read once
        samples: dict[str, list[tuple[float, float, int, int]]] = {name: [] for name in rows}
        for _ in range(rounds):
            for name, (path, params) in rows.items():
                wall, cpu = time.perf_counter(), cpu_seconds(broker.proc.pid)
                examined, returned = http_sweep(conn, path, params)
                samples[name].append((time.perf_counter() - wall, cpu_seconds(broker.proc.pid) - cpu, examined, returned))
        return [summary(name, runs) for name, runs in samples.items()]
    finally:
        conn.close()
        broker.stop()


def table(title: str, rows: list[tuple[str, float, float, int]], baseline: str) -> dict[str, float]:
    """Print the rows with their CPU ratio to the baseline row of the same format; the ratios by row."""
    by_name = {r[0]: r for r in rows}
    print(f"\n{title}\n")
    print("| row | examined msg/s | CPU us / examined msg | returned | CPU ratio to the unfiltered pull |")
    print("|---|---:|---:|---:|---:|")
    ratios = {}
    for name, rate, cpu_us, returned in rows:
        base = by_name[baseline if not name.startswith("batch") else "batch format, no filter (baseline)"]
        ratios[name] = cpu_us / base[2]
        print(f"| {name} | {rate:,.0f} | {cpu_us:.2f} | {returned:,} | {ratios[name]:.2f} |")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 messages, 3 rounds")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    messages, rounds = (20_000, 3) if args.quick else (args.messages, args.rounds)
    tmp = tempfile.mkdtemp(prefix="tidemq-sql-bench-")
    try:
        store_root = os.path.join(tmp, "store")
        fill(store_root, messages)
        print(f"{messages:,} messages of {len(BODY)} B in one queue; {rounds} rounds, medians; max={PULL_MAX} per pull")
        ratios = table("In process (store.get_message, the gather kernel; CPU of the calling thread)", in_process(store_root, rounds),
                       "no filter (baseline)")  # fmt: skip
        entries, ms, cpu_ms = window_get(store_root)
        print(f"\nOne get over {entries:,} entries none of which pass (the scan window): {ms:.2f} ms, {cpu_ms:.2f} ms CPU (best of 10)")
        ratios |= table("Over HTTP (one connection; the broker process's CPU)", over_http(tmp, rounds), "JSON, no filter (baseline)")
        same = [f"sql {ALL_PASS} (every message passes)", f"JSON, sql {ALL_PASS}", f"batch format, sql {ALL_PASS}"]
        print(f"\nTarget: the pull with a filter every message passes costs at most {TARGET_CPU_RATIO}x the CPU of the unfiltered")
        print("pull of the same messages (the filter costs no more than the pull it filters):")
        for name in same:
            print(f"  {name}: {ratios[name]:.2f} ({'met' if ratios[name] <= TARGET_CPU_RATIO else 'NOT met'})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
