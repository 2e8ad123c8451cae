"""Property-based run of schemathesis over the spec a live broker serves, against it: every check
schemathesis has, so that the spec says exactly what the server takes (a schema-valid request is not
refused as malformed, a schema-violating one is refused, replies match their schemas) and bad input is
answered with a problem, never a 500.

The broker runs with an ACL and is called with an administrator's token, so the authentication checks
(no token, a wrong one: 401) run too. Its spec is fetched from it: the bounds its settings decide (a low
max_wait_ms here, so that generated long-polls cannot each hold 30 s) are in it (app/openapi_limits.py).
The seed and the example count are fixed so that the run is repeatable and bounded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.app.acl_fixtures import ACL_TEXT, OPS, bearer
from tests.app.conftest import SMALL_STORE, MakeBroker

ROOT = Path(__file__).resolve().parents[2]
BROKER = """
[broker]
max_wait_ms = 200
max_request_body_bytes = 131072
max_json_body_bytes = 1048576
"""
# Operations whose schema-valid requests a broker may refuse as malformed, because what it takes depends on
# more than one field or on bytes no JSON Schema describes; each is refused with its own problem code, and the
# named tests check those refusals. Every other check still runs on them.
NOT_DESCRIBABLE = {
    # At most one of delay_level, delay_ms and deliver_at_ms (query or body), none with a transaction, and
    # deliver_at_ms at most timer_max_delay_ms from now: tests/app/test_produce.py, test_transactions.py.
    "produce": "relations between fields",
    # RocketMQ's binary batch encoding (lengths, magic code, CRC) inside a binary body: tests/app/test_produce_binary.py.
    "produceBinaryBatch": "a binary format",
    # A receipt handle is an HMAC-signed token this broker issued: tests/app/test_group_consumption.py.
    "changeInvisibleTime": "a signed token",
    # An SQL92 expression (`sql`, a group's `filter.sql`): a grammar no JSON Schema describes; a bad one is 400
    # FILTER_INVALID with its position: tests/app/test_sql_filters.py.
    "pull": "an SQL92 expression",
    "pullBatch": "an SQL92 expression",
    "receive": "an SQL92 expression",
    "putGroup": "an SQL92 expression",
    # The target's host must be one the operator lists (push_allowed_hosts): tests/app/test_push_targets.py.
    "putPushSubscription": "a setting of the broker",
}
# Every check; a request too large (a batch past maxItems) is refused with 413, which is a rejection too.
CONFIG = (
    "[checks]\nenabled = true\n\n[checks.negative_data_rejection]\n"
    "expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]\n"
) + "".join(
    f'\n[[operations]]\ninclude-operation-id = "{operation}"\nchecks.positive_data_acceptance.enabled = false\n'
    for operation in NOT_DESCRIBABLE
)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_schemathesis_finds_the_spec_and_the_server_agree(make_broker: MakeBroker, tmp_path: Path) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL_TEXT)
    broker = make_broker(SMALL_STORE + BROKER, args=["--acl", str(acl)])
    assert broker.client is not None
    spec = broker.client.get("/openapi.json", headers=bearer(OPS))
    assert spec.status_code == 200, spec.text
    (tmp_path / "openapi.json").write_bytes(spec.content)
    (tmp_path / "schemathesis.toml").write_text(CONFIG)
    cmd = [
        str(Path(sys.executable).parent / "st"),
        "--config-file",
        str(tmp_path / "schemathesis.toml"),
        "run",
        str(tmp_path / "openapi.json"),
        "--url",
        broker.url,
        "--header",
        f"Authorization: Bearer {OPS}",
        "--max-examples",
        "20",
        "--seed",
        "1",
        "--workers",
        "1",
        "--request-timeout",
        "10",
        "--report-dir",
        str(tmp_path / "report"),
        # An event stream never ends by itself, so no request to it completes: tests/app/test_receive_stream.py covers it.
        "--exclude-operation-id",
        "receiveStream",
    ]
    hooks = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.app.schemathesis_hooks", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=280, env=hooks)
    failures = done.stdout.find("FAILURES")  # every failure, not only the last ones
    assert done.returncode == 0, done.stdout[max(0, failures) :][:30000] + done.stderr[-2000:]
    assert "Test cases:" in done.stdout and " 0 passed" not in done.stdout
    # The run reached the server: it served requests and never answered 500.
    assert "INTERNAL_ERROR" not in broker.client.get("/metrics", headers=bearer(OPS)).text
