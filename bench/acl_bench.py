"""The access gate's cost: single JSON produces of 1 KiB to one broker without an ACL and one with (20 other accounts
and patterns, so the lookup is not the trivial one-entry case), both driven by bench/loadgen.c with the same
connections, in interleaved rounds (every other one in reverse order) so that drift on a shared machine meets both.
Each figure is the round with the median server CPU per request; the ratio of CPU per request is the verdict.

    python -m bench.acl_bench [--seconds 2] [--rounds 3] [--connections 32]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile

import httpx

from bench.http_bench import BODY_BYTES, STORE_CONFIG, TOPIC, Broker
from bench.load_generator import Measured, http_request, load_average, loadgen, median_of

TOKEN = "bench-token-0123456789abcdef0123456789abcdef"


def acl_config(root: str) -> str:
    path = os.path.join(root, "acl.toml")
    with open(path, "w") as f:
        for i in range(20):
            f.write(f'[[accounts]]\nname = "other-{i}"\ntoken_sha256 = "{hashlib.sha256(str(i).encode()).hexdigest()}"\n')
            f.write(f'topics = {{ "team-{i}-*" = "PUB|SUB", "shared" = "SUB" }}\n')
        f.write(f'[[accounts]]\nname = "bench"\ntoken_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\n')
        f.write(f'topics = {{ "{TOPIC}*" = "PUB|SUB|CREATE", "{TOPIC}-secret" = "DENY" }}\n')
    return STORE_CONFIG.replace("[broker]\n", f'[broker]\nacl_file = "{path}"\n', 1)


def produce_request(token: str | None) -> bytes:
    """One single JSON produce of a 1 KiB body, with `Authorization: Bearer token` when given."""
    body = json.dumps({"body": "x" * BODY_BYTES}).encode()
    request = http_request("POST", f"/v1/topics/{TOPIC}/messages", body, "application/json")
    if token is None:
        return request
    head, _, rest = request.partition(b"\r\n")
    return head + b"\r\nauthorization: Bearer " + token.encode() + b"\r\n" + rest


def row(name: str, m: Measured, baseline: Measured | None) -> str:
    ratio = f"{m.server_us_per_request / baseline.server_us_per_request:.2f}x" if baseline is not None else "1.00x"
    return (
        f"| {name} | {m.requests_per_s:,.0f} | {m.server_us_per_request:.1f} | {m.server_cores:.2f} | {m.client_cores:.2f} "
        f"| {m.errors} | {m.load:.2f} | {ratio} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    print(f"load average {load_average():.2f}; {args.connections} connections, {args.seconds:g} s a run, {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as open_root, tempfile.TemporaryDirectory() as acl_root:
        brokers = {"without an ACL": (Broker(open_root), None), "with an ACL": (Broker(acl_root, acl_config(acl_root)), TOKEN)}
        try:
            for broker, token in brokers.values():  # topics are created explicitly
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                httpx.put(f"http://127.0.0.1:{broker.port}/v1/topics/{TOPIC}", json={"queues": 4}, headers=headers).raise_for_status()
            runs: dict[str, list[Measured]] = {name: [] for name in brokers}
            for i in range(args.rounds):
                order = list(brokers.items()) if i % 2 == 0 else list(reversed(brokers.items()))
                for name, (broker, token) in order:
                    m = loadgen(broker.port, produce_request(token), "http", broker.proc.pid, args.connections, args.seconds)
                    assert m.errors == 0, f"{name}: {m.errors} errors"
                    runs[name].append(m)
                    print(f"  round {i + 1}: {name}: {m.requests_per_s:,.0f} req/s, {m.server_us_per_request:.1f} us CPU/req", flush=True)
        finally:
            for broker, _ in brokers.values():
                broker.stop()
    plain, gated = median_of(runs["without an ACL"]), median_of(runs["with an ACL"])
    print("| single JSON produce, 1 KiB | req/s | server CPU us/req | server cores | generator cores | errors | load | CPU vs without |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(row("without an ACL", plain, None))
    print(row("with an ACL, a bearer token", gated, plain))


if __name__ == "__main__":
    main()
