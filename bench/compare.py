"""Side-by-side benchmark: tidemq against NATS JetStream and Redis Streams on this machine.

    .venv/bin/python bench/compare.py [--quick] [--out DIR] [--no-install] [--only tidemq,redis]

Every system is started here on loopback with a temporary data directory, gets the same
workloads (bench/compare_workloads.py) from its usual Python client (bench/compare_clients.py),
and is stopped before the next one starts, so the systems never compete for the two cores.
The report (bench/compare_report.py) is `<out>/<date>-<host>.md` with PNG charts beside it.

Invariants: a peer that cannot run is skipped with its reason in the report and on stderr,
never silently; a workload that fails on one system is recorded as failed for that system and
the others still run; no server outlives the run (each is stopped in a `finally`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shlex
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.compare_clients import BrokerClient, client_for  # noqa: E402
from bench.compare_machine import describe, load_average  # noqa: E402
from bench.compare_peers import TIDEMQ_BENCH_TOML, NatsPeer, Peer, RedisPeer, TidemqPeer, Unavailable  # noqa: E402
from bench.compare_report import write_report  # noqa: E402
from bench.compare_workloads import catch_up, latency, make_bodies, produce, warm_up  # noqa: E402
from bench.load_generator import cpu_seconds  # noqa: E402

SYSTEMS = ("tidemq", "nats", "redis")


@dataclass
class Plan:
    """Message counts and shapes of one run (the same for every system)."""

    name: str
    sizes: tuple[int, ...] = (128, 1024, 16384)
    # Concurrent calls in flight in the produce tests.
    concurrency: int = 8
    # Messages per call in the batched produce test.
    batch: int = 100
    # Messages of the one-per-call produce test, per size.
    single_count: dict[int, int] = field(default_factory=lambda: {128: 5_000, 1024: 5_000, 16384: 5_000})
    # Messages of the batched produce test, per size.
    batch_count: dict[int, int] = field(default_factory=lambda: {128: 200_000, 1024: 200_000, 16384: 50_000})
    # Stored messages read back by the catch-up test, and their size.
    catch_up_count: int = 1_000_000
    catch_up_size: int = 128
    # Fixed send rate, timed messages and untimed warm-up messages of the latency test.
    latency_rate_per_s: int = 1000
    latency_count: int = 10_000
    latency_warmup: int = 1_000
    latency_size: int = 1024
    # Durable produce: message size and messages per number of concurrent producers.
    durable_size: int = 1024
    durable_count: dict[int, int] = field(default_factory=lambda: {1: 1_000, 64: 6_400})
    # Size of the sequential disk write test.
    disk_write_mib: int = 256


QUICK = Plan(
    name="quick",
    single_count={128: 100, 1024: 100, 16384: 100},
    batch_count={128: 1_000, 1024: 1_000, 16384: 500},
    catch_up_count=10_000,
    latency_count=300,
    latency_warmup=50,
    durable_count={1: 30, 64: 256},
    disk_write_mib=32,
)
FULL = Plan(name="full")


def log(line: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


class Recorder:
    """Collects figures and failures; one instance per run."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {"produce": [], "catch_up": [], "latency": [], "durable": []}
        self.failures: list[str] = []
        self.server_pid: int | None = None  # the peer's server process, whose CPU each attempt reads around it
        self.server_cpu_s = float("nan")  # the server's CPU seconds during the last attempt
        self.load = float("nan")  # the 1-minute load average at the end of the last attempt

    async def attempt(self, what: str, coro: Any) -> Any:
        before = cpu_seconds(self.server_pid) if self.server_pid is not None else float("nan")
        try:
            got = await coro
            self.server_cpu_s = cpu_seconds(self.server_pid) - before if self.server_pid is not None else float("nan")
            self.load = os.getloadavg()[0]
            return got
        except Exception as e:  # a failed workload is reported, the run goes on
            self.failures.append(f"{what}: {type(e).__name__}: {e}")
            log(f"FAILED {what}: {type(e).__name__}: {e}")
            traceback.print_exc(file=sys.stderr)
            return None


async def run_fast_suite(client: BrokerClient, peer: Peer, plan: Plan, rec: Recorder) -> None:
    """Produce (single and batched), catch-up and latency against an ASYNC_FLUSH / everysec peer."""
    for size in plan.sizes:
        bodies = make_bodies(size, seed=size)
        for mode, batch, count in (("single", 1, plan.single_count[size]), (f"batch{plan.batch}", plan.batch, plan.batch_count[size])):
            channel = f"produce-{mode}-{size}"
            await client.setup(channel)
            got = await rec.attempt(
                f"{peer.label} produce {mode} {size} B", produce(client, channel, bodies, count, plan.concurrency, batch)
            )
            await client.teardown(channel)
            if got is not None:
                rec.rows["produce"].append({"label": peer.label, "system": peer.system, "size": size, "mode": mode, **_tp(got, rec)})
                log(f"{peer.label} produce {mode} {size} B: {got.per_s:,.0f} msg/s")
    channel = "catch-up"
    await client.setup(channel)
    bodies = make_bodies(plan.catch_up_size, seed=7)
    got = await rec.attempt(f"{peer.label} catch-up", catch_up(client, channel, bodies, plan.catch_up_count))
    await client.teardown(channel)
    if got is not None:
        stored, read = got
        rec.rows["catch_up"].append(
            {"label": peer.label, "system": peer.system, "size": plan.catch_up_size, "store_per_s": stored.per_s, **_tp(read, rec)}
        )
        log(f"{peer.label} catch-up {read.messages:,} msgs: {read.per_s:,.0f} msg/s (stored at {stored.per_s:,.0f} msg/s)")
    channel = "latency"
    await client.setup(channel)
    lat = await rec.attempt(
        f"{peer.label} latency",
        latency(client, channel, plan.latency_size, plan.latency_rate_per_s, plan.latency_count, plan.latency_warmup, plan.concurrency),
    )
    await client.teardown(channel)
    if lat is not None:
        row = {"label": peer.label, "system": peer.system, "size": plan.latency_size, "rate_per_s": plan.latency_rate_per_s}
        row.update(sent=lat.sent, received=lat.received, achieved_per_s=lat.sent / lat.send_seconds)
        row.update(p50_us=lat.quantile(0.5), p99_us=lat.quantile(0.99))
        row.update(p999_us=lat.quantile(0.999), samples_us=lat.samples_us)
        rec.rows["latency"].append(row)
        log(f"{peer.label} latency p50 {row['p50_us']:.0f} us p99 {row['p99_us']:.0f} us p999 {row['p999_us']:.0f} us")


async def run_durable_suite(client: BrokerClient, peer: Peer, plan: Plan, rec: Recorder) -> None:
    bodies = make_bodies(plan.durable_size, seed=11)
    for producers, count in plan.durable_count.items():
        channel = f"durable-{producers}"
        await client.setup(channel)
        got = await rec.attempt(f"{peer.label} durable x{producers}", produce(client, channel, bodies, count, producers, 1))
        await client.teardown(channel)
        if got is not None:
            rec.rows["durable"].append({"label": peer.label, "system": peer.system, "producers": producers, **_tp(got, rec)})
            log(f"{peer.label} durable produce x{producers}: {got.per_s:,.0f} msg/s")


def _tp(t: Any, rec: Recorder) -> dict[str, Any]:
    """A throughput's row, with the server's CPU per message during its attempt and the load average."""
    cpu_us = rec.server_cpu_s / t.messages * 1e6 if t.messages else float("nan")
    return {"messages": t.messages, "seconds": t.seconds, "per_s": t.per_s, "server_cpu_us_per_msg": cpu_us, "load": rec.load}


async def drive(peer: Peer, plan: Plan, rec: Recorder, durable: bool) -> None:
    concurrency = max(plan.concurrency, *plan.durable_count) if durable else plan.concurrency
    client = client_for(peer.system, peer.port)
    rec.server_pid = peer.proc.pid if peer.proc is not None else None
    await client.open(concurrency)
    try:
        await warm_up(client, concurrency)
        if durable:
            await run_durable_suite(client, peer, plan, rec)
        else:
            await run_fast_suite(client, peer, plan, rec)
    finally:
        await client.close()


def run(args: argparse.Namespace) -> Path:
    plan = QUICK if args.quick else FULL
    only = set(args.only.split(",")) if args.only else set(SYSTEMS)
    rec = Recorder()
    apt_log: list[str] = []
    stages: list[tuple[Peer, bool]] = [
        (TidemqPeer("async"), False), (NatsPeer(), False), (RedisPeer("everysec"), False),
        (TidemqPeer("sync"), True), (NatsPeer(durable=True), True), (RedisPeer("always"), True),
    ]  # fmt: skip
    systems: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tidemq-compare-", dir=args.tmp) as tmp:
        workdir = Path(tmp)
        log(f"plan {plan.name}; measuring the disk in {workdir}")
        machine = describe(workdir, plan.disk_write_mib)
        log(f"disk: {machine['disk_write_mib_s']} MiB/s sequential, {machine['fsync_4k_us']} us per 4 KiB fsync")
        for peer, durable in stages:
            entry = systems.setdefault(peer.label, {"system": peer.system, "role": "durable" if durable else "fast"})
            if peer.system not in only:
                entry["skipped"] = "not selected (--only)"
                continue
            try:
                peer.ensure_available(allow_install=not args.no_install, log=apt_log)
                entry["version"] = peer.version()
                with peer.running(workdir):
                    entry["command"] = shlex.join(peer.command)
                    log(f"started {peer.label} on port {peer.port}")
                    asyncio.run(drive(peer, plan, rec, durable))
            except Unavailable as e:
                entry["skipped"] = str(e)
                log(f"SKIPPED {peer.label}: {e}")
            except Exception as e:  # a peer that breaks mid-run is reported; the others still run
                rec.failures.append(f"{peer.label}: {type(e).__name__}: {e}")
                log(f"FAILED {peer.label}: {type(e).__name__}: {e}")
                traceback.print_exc(file=sys.stderr)
    machine["load_end"] = load_average()
    meta = {
        "plan": asdict(plan),
        "machine": machine,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join([".venv/bin/python", "bench/compare.py", *sys.argv[1:]]),
        "apt": apt_log,
        "tidemq_toml": TIDEMQ_BENCH_TOML,
        "seconds": time.perf_counter() - started,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = write_report(out, meta, systems, rec.rows, rec.failures)
    log(f"report: {report} ({meta['seconds']:.0f} s)")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: checks the harness end to end in under two minutes")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "results"), help="directory of the report and charts")
    parser.add_argument("--no-install", action="store_true", help="skip a peer whose binary is missing instead of apt-installing it")
    parser.add_argument("--only", default="", help="comma-separated systems to run (tidemq,nats,redis); default all")
    parser.add_argument("--tmp", default=None, help="parent of the temporary data directories (default: the system's)")
    args = parser.parse_args(argv)
    unknown = set(filter(None, args.only.split(","))) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown system(s) in --only: {', '.join(sorted(unknown))}")
    # SIGTERM unwinds like Ctrl-C, so every `finally` stops its server and the temporary directory goes.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
