"""What bench/versus_redis.py's sections share: the Redis peers, ratios and the results table."""

from __future__ import annotations

from pathlib import Path

from bench.compare_peers import RedisPeer
from bench.load_generator import Measured

BODY_BYTES = 1024


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b and b == b and a == a else "-"


class RedisInMemory(RedisPeer):
    """Redis with no persistence at all (no AOF, no RDB snapshots): the peer of tidemq's ASYNC_FLUSH."""

    def __init__(self) -> None:
        super().__init__("everysec")
        self.label = "redis (appendonly no, save '')"

    def argv(self, data_dir: Path) -> list[str]:
        assert self.binary_path
        return [
            self.binary_path, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(data_dir),
            "--appendonly", "no", "--save", "", "--daemonize", "no",
        ]  # fmt: skip


def start_redis(peer: RedisPeer, root: str) -> tuple[RedisPeer | None, str]:
    reason = peer.start_or_reason(Path(root))
    return (None, reason) if reason is not None else (peer, "")


def redis_flush(port: int) -> None:
    """Drop every stream between runs: each run starts from an empty server, and memory stays bounded."""
    import redis

    redis.Redis(port=port).flushall()


def print_table(rows: list[tuple[str, Measured | None, str]]) -> None:
    """rows: (figure, measurement, comparison text)."""
    print("| figure | msg/s | req/s | server CPU us/req | us/msg | server cores | generator cores | errors | load | vs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, m, versus in rows:
        if m is None:
            print(f"| {name} | - | - | - | - | - | - | - | - | {versus} |")
            continue
        print(
            f"| {name} | {m.messages_per_s:,.0f} | {m.requests_per_s:,.0f} | {m.server_us_per_request:.1f} | "
            f"{m.server_us_per_message:.2f} | {m.server_cores:.2f} | {m.client_cores:.2f} | {m.errors} | {m.load:.2f} | {versus} |"
        )
