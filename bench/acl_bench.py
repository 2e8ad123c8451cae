"""The access gate's cost: single JSON produce rate with and without an ACL (wrk, one broker each,
alternating runs so drift on a shared machine hits both alike).

    python -m bench.acl_bench [--seconds 3] [--rounds 3] [--connections 32]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile

import httpx

from bench.http_bench import BODY_BYTES, STORE_CONFIG, TOPIC, Broker, ensure_wrk, post_script, wrk

TOKEN = "bench-token-0123456789abcdef0123456789abcdef"


def acl_config(root: str) -> str:
    path = os.path.join(root, "acl.toml")
    with open(path, "w") as f:
        # Several accounts and patterns, so the lookup is not the trivial one-entry case.
        for i in range(20):
            f.write(f'[[accounts]]\nname = "other-{i}"\ntoken_sha256 = "{hashlib.sha256(str(i).encode()).hexdigest()}"\n')
            f.write(f'topics = {{ "team-{i}-*" = "PUB|SUB", "shared" = "SUB" }}\n')
        f.write(f'[[accounts]]\nname = "bench"\ntoken_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\n')
        f.write(f'topics = {{ "{TOPIC}*" = "PUB|SUB|CREATE", "{TOPIC}-secret" = "DENY" }}\n')
    return STORE_CONFIG.replace("[broker]\n", f'[broker]\nacl_file = "{path}"\n', 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    binary = ensure_wrk()
    assert binary, "wrk is needed"
    body = json.dumps({"body": "x" * BODY_BYTES, "queue_id": 1})
    path = f"/v1/topics/{TOPIC}/messages"
    plain_script = post_script(body, "application/json", path)
    acl_script = plain_script + f'wrk.headers["Authorization"] = "Bearer {TOKEN}"\n'
    with tempfile.TemporaryDirectory() as open_root, tempfile.TemporaryDirectory() as acl_root:
        brokers = {"without ACL": (Broker(open_root), plain_script), "with ACL": (Broker(acl_root, acl_config(acl_root)), acl_script)}
        try:
            rates: dict[str, list[float]] = {name: [] for name in brokers}
            for name, (broker, _) in brokers.items():  # topics are created explicitly
                headers = {"Authorization": f"Bearer {TOKEN}"} if name == "with ACL" else {}
                httpx.put(f"http://127.0.0.1:{broker.port}/v1/topics/{TOPIC}", json={"queues": 4}, headers=headers).raise_for_status()
            for broker, script in brokers.values():  # warm-up, not counted
                wrk(binary, f"http://127.0.0.1:{broker.port}", script, 2, args.connections, open_root)
            for _ in range(args.rounds):
                for name, (broker, script) in brokers.items():
                    rate, errors = wrk(binary, f"http://127.0.0.1:{broker.port}", script, args.seconds, args.connections, open_root)
                    assert errors == 0, f"{name}: {errors} errors"
                    rates[name].append(rate)
            for name, values in rates.items():
                print(f"{name}: {' '.join(f'{v:,.0f}' for v in values)} req/s (best {max(values):,.0f})")
            best = max(rates["with ACL"]) / max(rates["without ACL"])
            median = statistics.median(rates["with ACL"]) / statistics.median(rates["without ACL"])
            print(f"ratio with/without ACL: {median:.3f} (medians), {best:.3f} (best runs)")
        finally:
            for broker, _ in brokers.values():
                broker.stop()


if __name__ == "__main__":
    main()
