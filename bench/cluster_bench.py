"""Cluster benchmark (make bench-cluster): produce throughput of two broker groups against one, and the failover window.

Every run starts its own etcd and broker processes on loopback (cluster/local_cluster.py) over
temporary stores, groups of two brokers under SYNC_MASTER (a put is answered once the slave has it):
1. throughput: `--producers` threads put `--body-bytes` messages for `--seconds` to the masters
   directly, one topic per group: one group with `min_in_sync_replicas` 1 (the baseline every
   other rate is a ratio to), one group with `min_in_sync_replicas` 2 (the same work: both brokers
   hold every acknowledged put either way, 2 only refuses writes when one is left), two groups;
   then two groups and one topic spanning both, sent to every broker of the cluster (one address
   per producer, as a client that knows no route: each broker spreads the produces over the
   groups, forwarding what it does not serve itself). Beside each rate: the CPU time of the broker
   processes per acknowledged message (from /proc, over the measured interval);
2. failover: one group under the same load, through both of its brokers; its master is SIGKILLed
   `--rounds` times and restarted at once (back in sync before the next round). Two windows, as
   p50 and max: from the kill until the slave is a master accepting puts, and the producers'
   outage, the longest gap between two acknowledged puts around the kill (under SYNC_MASTER the
   new master acknowledges again only once it has a slave: the restarted broker).
On a machine with few cores the groups share the CPUs with each other and with the producers, so
two groups measure the scaling that is left, not the one of separate machines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load_generator import cpu_seconds
from cluster.local_cluster import FAST_FAILOVER, LocalCluster

# Sent when a request must be served by the broker it is addressed to (cluster/forwarding.py).
DIRECT = {"tidemq-forwarded-by": "bench"}
BASE_PORT = 18_500


def status(url: str) -> dict[str, Any]:
    try:
        section: dict[str, Any] = httpx.get(url + "/v1/store", timeout=2.0).json().get("cluster", {})
        return section
    except (httpx.HTTPError, ValueError):
        return {}


def wait(predicate: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def masters(cluster: LocalCluster) -> list[str]:
    urls = [cluster.broker_url(g, j) for g in range(cluster.groups) for j in range(cluster.brokers)]
    wait(lambda: sum(status(u).get("accepting_puts", False) for u in urls) == cluster.groups, 30, "a master per group")
    return [u for u in urls if status(u).get("accepting_puts")]


def all_in_sync(cluster: LocalCluster) -> bool:
    for g in range(cluster.groups):
        urls = [cluster.broker_url(g, j) for j in range(cluster.brokers)]
        master = next((u for u in urls if status(u).get("accepting_puts")), None)
        if master is None or len(status(master).get("in_sync", [])) != cluster.brokers - 1:
            return False
    return True


class Load:
    """`producers` threads putting to `targets` (thread i uses target i mod n), counting acknowledged puts and when they came."""

    def __init__(self, targets: list[tuple[str, str]], producers: int, body: str) -> None:
        self.targets, self.body, self.producers = targets, body, producers
        self.acked = 0
        self.ack_times: list[float] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(producers)]

    def run(self, i: int) -> None:
        url, topic = self.targets[i % len(self.targets)]
        with httpx.Client(base_url=url, timeout=5.0) as client:
            while not self.stop.is_set():
                try:
                    r = client.post(f"/v1/topics/{topic}/messages", json={"body": self.body})
                except httpx.TransportError:
                    continue
                if r.status_code == 201:
                    self.acked += 1
                    self.ack_times.append(time.monotonic())

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


def cpu_seconds_of(pids: list[int]) -> float:
    """User plus system CPU seconds of the processes (each one's CPU clock: bench.load_generator.cpu_seconds)."""
    return sum(cpu_seconds(pid) for pid in pids)


def throughput(groups: int, args: argparse.Namespace, spanning: bool = False, min_in_sync: int = 1) -> tuple[float, float]:
    """(acknowledged messages per second, broker CPU seconds per message)."""
    with tempfile.TemporaryDirectory(prefix="tidemq-cluster-bench-") as root:
        config = FAST_FAILOVER + f"min_in_sync_replicas = {min_in_sync}\n"
        cluster = LocalCluster(Path(root), groups, 2, BASE_PORT, config)
        try:
            cluster.start()
            found = masters(cluster)
            wait(lambda: all_in_sync(cluster), 30, "the slaves to be in sync")
            targets = [(url, f"bench{g}") for g, url in enumerate(found)]
            if spanning:
                targets = [(url, "wide") for url in cluster.urls()]
            for url in found if spanning else [u for u, _ in targets]:
                topic = "wide" if spanning else dict(targets)[url]
                # Marked as forwarded: created on this master itself, so a spanning topic is created on each group.
                r = httpx.put(f"{url}/v1/topics/{topic}", json={"queues": 8}, headers=DIRECT, timeout=10.0)
                r.raise_for_status()
            if spanning:
                wait(lambda: spans(cluster.urls(), "wide", groups), 30, "every broker to route the topic to every group")
            pids = [p.pid for name, p in cluster.procs.items() if name != "etcd"]
            with Load(targets, args.producers, "x" * args.body_bytes) as load:
                time.sleep(args.seconds / 4)  # warm-up
                before, started, cpu_before = load.acked, time.monotonic(), cpu_seconds_of(pids)
                time.sleep(args.seconds)
                acked, elapsed, cpu = load.acked - before, time.monotonic() - started, cpu_seconds_of(pids) - cpu_before
                return acked / elapsed, cpu / max(acked, 1)
        finally:
            cluster.stop()


def spans(urls: list[str], topic: str, groups: int) -> bool:
    for url in urls:
        r = httpx.get(f"{url}/v1/topics/{topic}/route", timeout=5.0)
        if r.status_code != 200 or len(r.json()["groups"]) != groups:
            return False
    return True


def kill_and_wait(cluster: LocalCluster, load: Load, urls: list[str]) -> tuple[float, float]:
    """SIGKILL the master, restart it at once; seconds until a master (the slave, or the restarted broker when its
    log goes further) accepts puts again, and the producers' outage:
    the longest gap between two acknowledged puts from just before the kill until puts are acknowledged again."""
    wait(lambda: all_in_sync(cluster), 60, "the slave to be in sync")
    time.sleep(0.5)
    index = next(j for j in range(2) if status(urls[j]).get("accepting_puts"))
    killed_at = time.monotonic()
    cluster.kill(cluster.broker_name(0, index))
    restart = threading.Thread(target=cluster.start_broker, args=(0, index))
    restart.start()
    # Either broker: the restarted one is elected when its log goes further (cluster/election.py's `rival`).
    wait(lambda: any(status(url).get("accepting_puts", False) for url in urls), 30, "a new master")
    elected = time.monotonic() - killed_at
    # Replies already on their way when the master died may still arrive just after the kill.
    resumed_after = time.monotonic()
    wait(lambda: load.ack_times[-1] > resumed_after, 60, "a put acknowledged after the election")
    restart.join()
    times = sorted(t for t in load.ack_times if t >= killed_at - 1.0)
    return elected, max(b - a for a, b in zip(times, times[1:], strict=False))


def failover_windows(args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Per round: seconds from the kill until the slave is a master, and until the next acknowledged put.

    The killed broker is restarted at once, as a supervisor would: under SYNC_MASTER the new master
    acknowledges puts again only once it has a slave, so the second window includes that restart.
    """
    elected, acked = [], []
    with tempfile.TemporaryDirectory(prefix="tidemq-cluster-bench-") as root:
        cluster = LocalCluster(Path(root), 1, 2, BASE_PORT, FAST_FAILOVER)
        try:
            cluster.start()
            (master,) = masters(cluster)
            urls = [cluster.broker_url(0, j) for j in range(2)]
            # Topics are created explicitly (auto_create_topics is off): without it every put is refused (404).
            httpx.put(f"{master}/v1/topics/failover", json={"queues": 8}, timeout=10.0).raise_for_status()
            with Load([(u, "failover") for u in urls], args.producers, "x" * args.body_bytes) as load:
                for _ in range(args.rounds):
                    window = kill_and_wait(cluster, load, urls)
                    elected.append(window[0])
                    acked.append(window[1])
        finally:
            cluster.stop()
    return elected, acked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--body-bytes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 s per measurement, 2 failovers")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = 2.0, 2
    one = throughput(1, args)
    one_min2 = throughput(1, args, min_in_sync=2)
    two = throughput(2, args)
    wide = throughput(2, args, spanning=True)
    print(f"produce, SYNC_MASTER groups of 2, {args.producers} producers, {args.body_bytes} B bodies (CPU: the brokers'):")
    rows = [
        ("1 group, min_in_sync_replicas 1 (baseline)", one),
        ("1 group, min_in_sync_replicas 2", one_min2),
        ("2 groups", two),
        ("2 groups, one spanning topic, via every broker", wide),
    ]
    for label, (rate, cpu) in rows:
        print(f"  {label:48}: {rate:8,.0f} msg/s ({rate / one[0]:.2f}x), {cpu * 1e6:7.0f} us CPU/msg ({cpu / one[1]:.2f}x)")
    elected, acked = failover_windows(args)
    print(f"failover, SIGKILL of the master ({len(elected)} rounds, lease_ttl_s 2, the killed broker restarted at once):")
    print(f"  until a new master accepts puts : p50 {statistics.median(elected):.2f} s, max {max(elected):.2f} s")
    print(f"  producers' outage (longest gap between acknowledged puts): p50 {statistics.median(acked):.2f} s, max {max(acked):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
