"""Produce CPU per message: the broker's CPU time per stored message, one source tree against another.

Each tree (a checkout of tidemq: the baseline first, then this one) serves a broker process
(`python -m app serve` run from that tree) over a temporary store; wrk drives each scenario for the
same time, and the broker's own CPU time (user + system, from /proc) over the run is divided by the
messages it stored. The ratio after/before is per scenario, both measured in this one run, so
load from elsewhere on a shared machine shifts both alike. Scenarios (1 KiB bodies):
1. single JSON produce;
2. JSON batch of 100;
3. binary batch of 100 (application/x-tidemq-batch, each message with a UNIQ_KEY);
4. with --keys: single JSON produce with a fresh Idempotency-Key per request, and a JSON batch of
   100 with a fresh dedup_id per message (the cost of idempotent produce against 1 and 2).
An in-process store row times `put_messages` of 100 MessageInner objects and single
`put_message` calls (process CPU per message), in a subprocess per tree.

Usage: python bench/produce_cpu_bench.py --before TREE [--after TREE] [--seconds S] [--rounds N] [--keys]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.http_bench import BATCH, BODY_BYTES, TOPIC, binary_batch, ensure_wrk, free_port, lua_string, post_script, wrk
from bench.load_generator import cpu_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORE_CONFIG = """
[broker]
max_json_body_bytes = 33554432
[store]
mapped_file_size_commit_log_bytes = 268435456
"""
# dedup_max_keys of the broker the keyed rows run on.
KEYED_MAX_KEYS = 5_000_000
# The in-process put row: messages per round and rounds.
STORE_ROUNDS = 300


def context_switches(pid: int) -> int:
    """Context switches of every thread of a process so far (voluntary and not): a waiting thread's every
    wake-up, and the futile ones a thread waiting for the GIL makes (docs/concurrency.md)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                total += sum(int(line.split()[1]) for line in f if "ctxt_switches:" in line)
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return total


class TreeBroker:
    """A broker process run from one source tree."""

    def __init__(self, tree: str, root: str, extra_store_config: str = "") -> None:
        self.port = free_port()
        config = os.path.join(root, "bench.toml")
        with open(config, "w") as f:
            f.write(STORE_CONFIG + extra_store_config)
        env = dict(os.environ, PYTHONPATH=tree)
        cmd = [sys.executable, "-m", "app", "serve", "--port", str(self.port), "--store", os.path.join(root, "store"), "--config", config]
        self.log = open(os.path.join(root, "broker.log"), "wb")
        self.proc = subprocess.Popen([*cmd, "--log-level", "warning"], cwd=tree, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self._ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker of {tree} did not become ready")
            time.sleep(0.05)

    def _ready(self) -> bool:
        import http.client

        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("PUT", f"/v1/topics/{TOPIC}", json.dumps({"queues": 4}), {"content-type": "application/json"})
            status = conn.getresponse().status
            conn.close()
            return status in (200, 201)
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def keyed_single_script(path: str, body: str, prefix: str) -> str:
    """A JSON produce with a fresh Idempotency-Key per request."""
    return (
        'wrk.method = "POST"\n'
        f"wrk.path = {lua_string(path)}\n"
        f"wrk.body = {lua_string(body)}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
        "local n = 0\n"
        "request = function()\n"
        "  n = n + 1\n"
        f'  wrk.headers["Idempotency-Key"] = "{prefix}-" .. n\n'
        "  return wrk.format()\n"
        "end\n"
    )


def keyed_batch_script(path: str, body: str, prefix: str) -> str:
    """A JSON batch of BATCH messages, each with a fresh dedup_id."""
    head = lua_string('{"body": ' + json.dumps(body) + ', "queue_id": 2, "dedup_id": "')
    return (
        'wrk.method = "POST"\n'
        f"wrk.path = {lua_string(path)}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
        "local n = 0\n"
        "request = function()\n"
        "  local parts = {}\n"
        f"  for i = 1, {BATCH} do\n"
        "    n = n + 1\n"
        f'    parts[i] = {head} .. "{prefix}-" .. n .. "\\"}}"\n'
        "  end\n"
        '  return wrk.format(nil, nil, nil, "{\\"messages\\": [" .. table.concat(parts, ",") .. "]}")\n'
        "end\n"
    )


def scenarios(keys: bool) -> list[tuple[str, str, int]]:
    """(name, wrk script, messages per request)."""
    path = f"/v1/topics/{TOPIC}/messages"
    body = "x" * BODY_BYTES
    out = [
        ("single JSON", post_script(json.dumps({"body": body, "queue_id": 1}), "application/json", path), 1),
        (
            f"JSON batch {BATCH}",
            post_script(json.dumps({"messages": [{"body": body, "queue_id": 2}] * BATCH}), "application/json", path),
            BATCH,
        ),
        (
            f"binary batch {BATCH}",
            post_script(binary_batch(body.encode(), BATCH), "application/x-tidemq-batch", path + "?queue_id=3"),
            BATCH,
        ),
    ]
    if keys:
        stamp = f"{time.time_ns():x}"
        out += [
            ("single JSON + Idempotency-Key", keyed_single_script(path, json.dumps({"body": body, "queue_id": 1}), f"s{stamp}"), 1),
            (f"JSON batch {BATCH} + dedup_id", keyed_batch_script(path, body, f"b{stamp}"), BATCH),
        ]
    return out


Row = tuple[float, float, int, float]  # messages/s, broker CPU µs per message, errors, context switches per message


def measure_tree(tree: str, binary: str, seconds: int, connections: int, keys: bool) -> dict[str, Row]:
    """Per scenario: (messages/s, broker CPU µs per message, non-2xx and socket errors, context switches per message)."""
    out: dict[str, Row] = {}
    with tempfile.TemporaryDirectory(prefix="tidemq-cpu-bench-") as root:
        # The keyed rows remember every id they send: room for all of them (the default bound would refuse past it).
        broker = TreeBroker(tree, root, f"dedup_max_keys = {KEYED_MAX_KEYS}\n" if keys else "")
        try:
            url = f"http://127.0.0.1:{broker.port}"
            for name, script, per_request in scenarios(keys):
                wrk(binary, url, script, 1, connections, root)  # warm-up, not counted
                cpu0, switches0, t0 = cpu_seconds(broker.proc.pid), context_switches(broker.proc.pid), time.monotonic()
                rate, errors = wrk(binary, url, script, seconds, connections, root)
                cpu = cpu_seconds(broker.proc.pid) - cpu0
                switches = context_switches(broker.proc.pid) - switches0
                elapsed = time.monotonic() - t0
                messages = rate * per_request * seconds * (elapsed / seconds)
                out[name] = (
                    rate * per_request,
                    cpu / messages * 1e6 if messages else 0.0,
                    errors,
                    switches / messages if messages else 0.0,
                )
                print(
                    f"  {os.path.basename(tree.rstrip('/'))}: {name}: {rate * per_request:,.0f} msg/s, {out[name][1]:.1f} µs CPU/msg, "
                    f"{out[name][3]:.3f} context switches/msg",
                    flush=True,
                )
        finally:
            broker.stop()
    return out


STORE_PUT_CODE = f"""
import os, tempfile, time, shutil
from store import DefaultMessageStore, MessageStoreConfig, build_message
d = tempfile.mkdtemp(prefix="tidemq-cpu-put-")
store = DefaultMessageStore(MessageStoreConfig(store_path_root_dir=d, mapped_file_size_commit_log_bytes=1 << 27))
store.load(); store.start()
body = b"x" * {BODY_BYTES}
batches = [[build_message("{TOPIC}", body, i % 4) for i in range({BATCH})] for _ in range({STORE_ROUNDS})]
singles = [build_message("{TOPIC}", body, 1) for _ in range({STORE_ROUNDS} * 20)]
c0 = time.process_time()
for msgs in batches:
    assert store.put_messages(msgs).ok
c1 = time.process_time()
for msg in singles:
    assert store.put_message(msg).ok
c2 = time.process_time()
store.shutdown(); shutil.rmtree(d, ignore_errors=True)
print((c1 - c0) / ({STORE_ROUNDS} * {BATCH}) * 1e6, (c2 - c1) / len(singles) * 1e6)
"""


def store_put_cpu(tree: str) -> tuple[float, float]:
    """Process CPU µs per message of put_messages (100 per call) and of put_message, in-process, from `tree`."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, "-c", STORE_PUT_CODE], cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(out.stderr)
    batch, single = (float(x) for x in out.stdout.split())
    return batch, single


def median_rows(rounds: list[dict[str, Row]]) -> dict[str, Row]:
    """Per scenario: the median rate, the median CPU per message, the errors summed over the rounds, the median
    context switches per message."""
    return {
        name: (
            statistics.median(r[name][0] for r in rounds),
            statistics.median(r[name][1] for r in rounds),
            sum(r[name][2] for r in rounds),
            statistics.median(r[name][3] for r in rounds),
        )
        for name in rounds[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the baseline source tree")
    parser.add_argument("--after", default=ROOT, help="the tree measured against it (default: this one)")
    parser.add_argument("--seconds", type=int, default=5, help="seconds per wrk scenario")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per tree (medians are reported)")
    parser.add_argument("--keys", action="store_true", help="also the keyed scenarios (the after tree only)")
    args = parser.parse_args()
    binary = ensure_wrk()
    if binary is None:
        sys.exit("wrk is not installed (apt-get install -y wrk)")
    runs: dict[str, list[dict[str, Row]]] = {"before": [], "after": []}
    puts: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    for _ in range(args.rounds):  # the trees alternate, so a load change elsewhere hits both
        runs["before"].append(measure_tree(args.before, binary, args.seconds, args.connections, False))
        runs["after"].append(measure_tree(args.after, binary, args.seconds, args.connections, args.keys))
        puts["before"].append(store_put_cpu(args.before))
        puts["after"].append(store_put_cpu(args.after))
    before, after = median_rows(runs["before"]), median_rows(runs["after"])
    put_before = tuple(statistics.median(p[i] for p in puts["before"]) for i in range(2))
    put_after = tuple(statistics.median(p[i] for p in puts["after"]) for i in range(2))
    print(f"\nmedians of {args.rounds} alternating rounds, {args.seconds} s per scenario")
    print()
    print(
        "| scenario | before msg/s | after msg/s | before µs CPU/msg | after µs CPU/msg | CPU ratio after/before "
        "| context switches/msg before / after | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, (rate, cpu, errors, switches) in after.items():
        base = before.get(name)
        if base is None:
            continue
        print(
            f"| {name} | {base[0]:,.0f} | {rate:,.0f} | {base[1]:.1f} | {cpu:.1f} | {cpu / base[1]:.2f} "
            f"| {base[3]:.3f} / {switches:.3f} | {base[2] + errors} |"
        )
    for i, name in enumerate((f"store put_messages x{BATCH} (in-process)", "store put_message (in-process)")):
        print(f"| {name} | - | - | {put_before[i]:.2f} | {put_after[i]:.2f} | {put_after[i] / put_before[i]:.2f} | - | 0 |")
    keyed = [("single JSON + Idempotency-Key", "single JSON"), (f"JSON batch {BATCH} + dedup_id", f"JSON batch {BATCH}")]
    for name, plain in keyed:
        if name in after:
            rate, cpu, errors, switches = after[name]
            print(
                f"| {name} (after, vs {plain} after) | - | {rate:,.0f} | {after[plain][1]:.1f} | {cpu:.1f} "
                f"| {cpu / after[plain][1]:.2f} | - / {switches:.3f} | {errors} |"
            )


if __name__ == "__main__":
    main()
