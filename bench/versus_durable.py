"""bench/versus_redis.py's durable section: tidemq's SYNC_FLUSH produce beside Redis's `appendfsync always` XADD.

One C generator (bench/loadgen.c) for both, with 1 and `--producers` keep-alive connections posting 1 KiB raw bodies
to tidemq and sending XADD of 1 KiB to Redis, `--rounds` interleaved rounds, each figure the round with the median
server CPU per message. Beside them, at `--producers`: tidemq with its event loop handing every turn's flush wait to
the flush thread (`durable_wait_in_loop_ms = 0`), tidemq whose groups never linger for the producers just answered
(`durable_group_linger_us = 0`), one thread's raw write + fdatasync of a 1 KiB record on the same disk, and the
tidemq load on ASYNC_FLUSH. Every tidemq row says how many messages a flush served (its /metrics counters around
the run: messages stored over durable groups).
"""

from __future__ import annotations

import argparse
import os
import statistics

from bench.compare_peers import RedisPeer
from bench.http_bench import STORE_CONFIG, Broker
from bench.load_generator import Measured, http_request, loadgen, median_of, resp_command
from bench.raw_append import raw_append
from bench.versus_common import BODY_BYTES, print_table, ratio, redis_flush, start_redis

# The tidemq brokers of the section: name -> broker settings added to the bench's (all SYNC_FLUSH).
VARIANTS = {
    "tidemq": "",
    "tidemq hand-off": "durable_wait_in_loop_ms = 0\n",
    "tidemq no linger": "durable_group_linger_us = 0\n",
}
_COUNTED = ("tidemq_put_messages_total", "tidemq_durable_groups_total")


def durable_counts(broker: Broker) -> tuple[float, float]:
    """(messages stored, durable groups) from the broker's /metrics."""
    status, body = broker.request("GET", "/metrics")
    assert status == 200, body[:200]
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in body.decode().splitlines() if line.startswith(_COUNTED)}
    return values.get(_COUNTED[0], 0.0), values.get(_COUNTED[1], 0.0)


def grouped_run(broker: Broker, raw: bytes, producers: int, seconds: float) -> tuple[Measured, float]:
    """One loadgen run and the messages each durable group (one flush) served over it and its warm-up."""
    stored, groups = durable_counts(broker)
    m = loadgen(broker.port, raw, "http", broker.proc.pid, producers, seconds)
    stored_after, groups_after = durable_counts(broker)
    return m, (stored_after - stored) / max(1.0, groups_after - groups)


def start_brokers(root: str) -> dict[str, Broker]:
    brokers: dict[str, Broker] = {}
    try:
        for name, extra in VARIANTS.items():
            config = STORE_CONFIG.replace("[broker]\n", "[broker]\n" + extra, 1) + 'flush_disk_type = "SYNC_FLUSH"\n'
            broker = brokers[name] = Broker(os.path.join(root, name.replace(" ", "-")), config)
            broker.request("PUT", "/v1/topics/sync", b'{"queues": 4}')
    except BaseException:
        for broker in brokers.values():
            broker.stop()
        raise
    return brokers


def measure(root: str, args: argparse.Namespace, raw: bytes) -> tuple[dict[str, list[Measured]], dict[str, list[float]], str]:
    """Every variant's runs (and messages per flush) and Redis's, by '<name> <producers>', rounds interleaved."""
    brokers = start_brokers(root)
    peer, why = start_redis(RedisPeer("always"), root)
    runs: dict[str, list[Measured]] = {}
    per_flush: dict[str, list[float]] = {}
    try:
        for _ in range(args.rounds):
            for producers in (1, args.producers):
                for name, broker in brokers.items():
                    if name != "tidemq" and producers == 1:
                        continue  # one producer never lingers, and its loop waits alike
                    m, served = grouped_run(broker, raw, producers, args.seconds)
                    runs.setdefault(f"{name} {producers}", []).append(m)
                    per_flush.setdefault(f"{name} {producers}", []).append(served)
                if peer is not None:
                    assert peer.proc is not None
                    xadd = resp_command(b"XADD", b"dur", b"*", b"f", b"v" * BODY_BYTES)
                    runs.setdefault(f"redis {producers}", []).append(
                        loadgen(peer.port, xadd, "resp", peer.proc.pid, producers, args.seconds)
                    )
                    redis_flush(peer.port)
            done = ", ".join(f"{k} {v[-1].messages_per_s:,.0f}/s at {v[-1].server_us_per_message:.1f} us" for k, v in runs.items())
            print(f"  durable round done: {done}", flush=True)
    finally:
        for broker in brokers.values():
            broker.stop()
        if peer is not None:
            peer.stop()
    return runs, per_flush, why


def durable_section(root: str, args: argparse.Namespace) -> None:
    fsync_rate, fsync_cpu_us = raw_append(os.path.join(root, "raw-fsync"), b"r" * BODY_BYTES, min(args.seconds, 3.0), sync=True)
    raw = http_request("POST", "/v1/topics/sync/messages", b"x" * BODY_BYTES, "application/octet-stream")
    runs, per_flush, why = measure(root, args, raw)
    async_broker = Broker(os.path.join(root, "async"), STORE_CONFIG + 'flush_disk_type = "ASYNC_FLUSH"\n')
    try:
        async_broker.request("PUT", "/v1/topics/sync", b'{"queues": 4}')
        ceiling = loadgen(async_broker.port, raw, "http", async_broker.proc.pid, args.producers, args.seconds)
    finally:
        async_broker.stop()
    got = {k: median_of(v) for k, v in runs.items()}
    print(
        f"\nDurable puts of 1 KiB: bench/loadgen.c for both, 1 and {args.producers} connections, {args.rounds} interleaved rounds "
        f"(median by server CPU per message); tidemq SYNC_FLUSH raw-body produce, Redis appendfsync always XADD"
        + (f" ({why})" if why else "")
    )
    print(f"raw write + fdatasync of 1 KiB, one thread, same disk: {fsync_rate:,.0f}/s, {fsync_cpu_us:.1f} us CPU per call")
    labels = {"tidemq": "tidemq SYNC_FLUSH, {} producer(s)", "tidemq hand-off": "tidemq SYNC_FLUSH, {} producers, durable_wait_in_loop_ms = 0",
              "tidemq no linger": "tidemq SYNC_FLUSH, {} producers, durable_group_linger_us = 0"}  # fmt: skip
    rows: list[tuple[str, Measured | None, str]] = []
    for producers in (1, args.producers):
        theirs = got.get(f"redis {producers}")
        for name, label in labels.items():
            ours = got.get(f"{name} {producers}")
            if ours is None:
                continue
            versus = [f"{statistics.median(per_flush[f'{name} {producers}']):.1f} msg/flush"]
            if producers == 1:
                versus.append(f"{ours.messages_per_s / fsync_rate:.2f} of raw fdatasync rate")
            if theirs is not None:
                if name == "tidemq":
                    versus.append(f"rate {ratio(ours.messages_per_s, theirs.messages_per_s)} of redis")
                versus.append(f"CPU/msg redis/tidemq {ratio(theirs.server_us_per_message, ours.server_us_per_message)}")
            rows.append((label.format(producers), ours, "; ".join(versus)))
        rows.append((f"redis appendfsync always, {producers} producer(s)", theirs, ""))
    rows.append((f"tidemq ASYNC_FLUSH, {args.producers} producers (no durability wait)", ceiling, ""))
    print_table(rows)
    ours, theirs = got[f"tidemq {args.producers}"], got.get(f"redis {args.producers}")
    if theirs is not None:
        rate = ours.messages_per_s / theirs.messages_per_s
        cpu = theirs.server_us_per_message / ours.server_us_per_message
        met = "met" if rate >= 0.5 and cpu >= 0.5 else "NOT met"
        print(f"target {args.producers} producers >= 0.5 of redis: rate {rate:.2f}, CPU per message (redis/tidemq) {cpu:.2f}: {met}")
