"""Access control from outside: the ACL file's rules, lookups by digest, reload, rate limits,
the audit log, /metrics, the open broker's bind refusal and WARNING, and `tidemq acl hash`."""

from __future__ import annotations

import hashlib
import importlib
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.acl import CREATE, PUB, SUB, AclInvalid, parse_acl, token_hash
from core import ConfigInvalid
from tests.app.acl_fixtures import ACL_TEXT, BILLING, LIMITED, NEWCOMER, OPS, as_admin, bearer, create_topics, sha, start_with_acl
from tests.app.conftest import ROOT, SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker
from tests.app.helpers import problem
from tests.waiting import wait_for

# start_with_acl's parameter type: a factory of BrokerProcess. make_broker's brokers (in this process unless
# `process`) serve its uses alike, so the fixture is cast to it.
AclFactory = Callable[..., BrokerProcess]


def account(topics: dict[str, str], groups: dict[str, str] | None = None) -> dict[str, Any]:
    return {"accounts": [{"name": "a", "token_sha256": sha("t"), "topics": topics, "groups": groups or {}}]}


def test_most_specific_pattern_wins() -> None:
    acl = parse_acl(account({"*": "SUB", "billing-*": "PUB|SUB", "billing-eu-*": "DENY", "billing-eu-open": "PUB", "billing": "DENY"}))
    a = acl.authenticate(b"t")
    assert a is not None
    assert a.may(SUB, "anything", None) and not a.may(PUB, "anything", None)
    assert a.may(PUB | SUB, "billing-x", None)
    assert not a.may(SUB, "billing-eu-1", None)  # the longer prefix beats the shorter
    assert a.may(PUB, "billing-eu-open", None)  # exact beats any prefix
    assert not a.may(SUB, "billing", None)  # exact DENY beats "*"
    assert not parse_acl(account({"billing-*": "PUB"})).accounts[bytes.fromhex(sha("t"))].may(PUB, "billingx", None)
    assert not a.may(SUB, "anything", "no-group")  # a group not listed: no permission


def test_rights_combine_in_any_order() -> None:
    a = parse_acl(account({"x": "CREATE|PUB", "y": "SUB|CREATE|PUB"})).authenticate(b"t")
    assert a is not None
    assert a.may(PUB | CREATE, "x", None) and not a.may(SUB, "x", None)
    assert a.may(PUB | SUB | CREATE, "y", None)


def test_lookup_is_by_the_tokens_digest() -> None:
    acl = parse_acl(account({"x": "PUB"}))
    # The table is keyed by SHA-256 digests; the token itself is never stored or compared.
    assert set(acl.accounts) == {hashlib.sha256(b"t").digest()}
    assert acl.authenticate(b"t") is acl.accounts[hashlib.sha256(b"t").digest()]
    assert acl.authenticate(b"T") is None and acl.authenticate(b"") is None and acl.authenticate(b"t ") is None


@pytest.mark.parametrize(
    "data, fault",
    [
        ({"accounts": [{"name": "a", "token_sha256": "ab" * 31}]}, "64 hex"),
        ({"accounts": [{"name": "a", "token_sha256": "zz" * 32}]}, "64 hex"),
        ({"accounts": [{"name": "a", "token_sha256": sha("1")}, {"name": "a", "token_sha256": sha("2")}]}, "twice"),
        ({"accounts": [{"name": "a", "token_sha256": sha("1")}, {"name": "b", "token_sha256": sha("1")}]}, "same token"),
        (account({"bad name*": "PUB"}), "invalid"),
        (account({"a*b": "PUB"}), "invalid"),
        (account({"x": "WRITE"}), "one of"),
        (account({"x": "PUB|PUB"}), "one of"),
        (account({"x": "PUB|DENY"}), "one of"),
        ({"accounts": [{"name": "a", "token_sha256": sha("1"), "groups": {"g": "CREATE"}}]}, "one of"),
        ({"accounts": [{"name": "a", "token_sha256": sha("1"), "admin": "yes"}]}, "admin"),
        ({"accounts": [{"name": "a", "token_sha256": sha("1"), "rate_limit_per_s": 0}]}, "rate_limit_per_s"),
        ({"accounts": [{"name": "a", "token_sha256": sha("1"), "burst": 5}]}, "burst"),
        ({"accounts": [{"name": "a", "token_sha256": sha("1"), "colour": "red"}]}, "unknown"),
        ({"users": []}, "unknown"),
    ],
)
def test_invalid_files_are_refused(data: dict[str, Any], fault: str) -> None:
    with pytest.raises(AclInvalid, match=fault):
        parse_acl(data)


def test_message_by_id_needs_sub_on_its_topic(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker, _ = start_with_acl(make_broker, tmp_path)
    create_topics(broker, "orders")
    with as_admin(broker) as admin:
        sent = admin.post("/v1/topics/orders/messages", json={"body": "o"}).json()
    client = broker.client
    assert client is not None
    path = f"/v1/messages/{sent['offset_msg_id']}"
    assert client.get(path, headers=bearer(BILLING)).status_code == 200  # SUB on orders
    problem(client.get(path, headers=bearer(LIMITED)), 403, "FORBIDDEN")  # PUB on "limited" only
    problem(client.get(path), 401, "UNAUTHENTICATED")


def test_reload_takes_a_good_file_and_refuses_a_bad_one(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker, acl = start_with_acl(make_broker, tmp_path, process=True)  # its log
    client = broker.client
    assert client is not None
    assert client.get("/v1/topics/billing-a", headers=bearer(BILLING)).status_code == 404  # allowed: no such topic
    newcomer = f'[[accounts]]\nname = "newcomer"\ntoken_sha256 = "{sha(NEWCOMER)}"\nadmin = true\n'
    acl.write_text(ACL_TEXT.replace(sha(BILLING), sha("billing-rotated")) + newcomer)
    wait_for(
        lambda: client.get("/v1/topics", headers=bearer(NEWCOMER)).status_code == 200,
        5,
        what=lambda: f"the new ACL file to be in force:\n{broker.log()}",
        poll_s=0.1,
    )
    problem(client.get("/v1/topics/billing-a", headers=bearer(BILLING)), 401, "UNAUTHENTICATED")  # its token was rotated
    assert "ACL reloaded" in broker.log()
    acl.write_text(ACL_TEXT + "[[accounts]]\nname = 'broken'\ntoken_sha256 = 'nothex'\n")

    def refused() -> bool:
        client.get("/v1/topics", headers=bearer(NEWCOMER))  # the check runs on requests
        return "the new ACL file is refused" in broker.log()

    wait_for(refused, 5, what=lambda: f"the bad ACL file to be refused:\n{broker.log()}", poll_s=0.1)
    assert "ERROR tidemq.app: the new ACL file is refused" in broker.log()
    assert client.get("/v1/topics", headers=bearer(NEWCOMER)).status_code == 200  # the previous file stays
    problem(client.get("/v1/topics/billing-a", headers=bearer(BILLING)), 401, "UNAUTHENTICATED")


def test_rate_limit_answers_429_with_retry_after(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker, _ = start_with_acl(make_broker, tmp_path)
    create_topics(broker, "limited")
    client = broker.client
    assert client is not None
    answers = [client.post("/v1/topics/limited/messages", json={"body": "x"}, headers=bearer(LIMITED)) for _ in range(3)]
    assert [r.status_code for r in answers[:2]] == [201, 201]  # burst 2
    problem(answers[2], 429, "RATE_LIMITED")
    assert int(answers[2].headers["retry-after"]) >= 1
    # Other accounts are not limited by it.
    assert client.get("/v1/topics", headers=bearer(OPS)).status_code == 200
    time.sleep(1.1)  # the bucket's one-second refill must pass
    assert client.post("/v1/topics/limited/messages", json={"body": "x"}, headers=bearer(LIMITED)).status_code == 201


def test_a_token_given_back_is_the_next_requests() -> None:
    from app.access_gate import RateLimiter

    (account,) = [a for a in parse_acl(tomllib.loads(ACL_TEXT)).accounts.values() if a.name == "limited"]  # 1 a second, burst 2
    limiter = RateLimiter()
    assert [limiter.retry_after(account) for _ in range(3)] == [0, 0, 1]
    limiter.give_back(account)
    assert limiter.retry_after(account) == 0 and limiter.retry_after(account) == 1
    for _ in range(5):
        limiter.give_back(account)  # never past the burst
    assert [limiter.retry_after(account) for _ in range(3)] == [0, 0, 1]


def test_admin_actions_are_audited(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker, _ = start_with_acl(make_broker, tmp_path, process=True)  # its log
    client = broker.client
    assert client is not None
    assert client.put("/v1/topics/audited", json={}, headers=bearer(OPS)).status_code in (200, 201)
    client.delete("/v1/topics/audited", headers=bearer(BILLING))
    client.delete("/v1/topics/audited")
    client.delete("/v1/topics/audited", headers=bearer("no-such-token"))
    client.post("/v1/topics/billing-a/messages", json={"body": "x"}, headers=bearer(BILLING))
    # A last admin action: once its line is logged, a line the produce had made would be there too.
    assert client.delete("/v1/topics/audited", headers=bearer(OPS)).status_code == 204
    last = "tidemq.audit: DELETE /v1/topics/audited account=ops status=204"
    log = wait_for(lambda: text if last in (text := broker.log()) else None, 10, what="the last audit line")
    assert log is not None
    assert "tidemq.audit: PUT /v1/topics/audited account=ops status=20" in log
    # A known account refused for lacking admin is named; no token or an unknown one is "-".
    assert "tidemq.audit: DELETE /v1/topics/audited account=billing status=403" in log
    assert log.count("tidemq.audit: DELETE /v1/topics/audited account=- status=401") == 2
    assert "tidemq.audit: POST /v1/topics/billing-a/messages" not in log  # produce is not an admin action


CREATOR = "creator-token-5e0c7b"
CREATOR_ACL = (
    ACL_TEXT
    + f"""
[[accounts]]
name = "creator"
token_sha256 = "{sha(CREATOR)}"
topics = {{ "team-*" = "PUB|SUB|CREATE", "team-fixed" = "PUB|SUB" }}
"""
)


def test_creating_a_topic_needs_create_by_any_route(make_broker: MakeBroker, tmp_path: Path) -> None:
    """With auto-creation on, a produce to a missing topic creates it only for an account with CREATE on it;
    PUT creates with CREATE, and changes an existing topic only for an administrator."""
    broker, _ = start_with_acl(make_broker, tmp_path, CREATOR_ACL, config="auto_create_topics = true\n")
    client = broker.client
    assert client is not None
    # PUB on billing-* does not create billing-eu, by a produce or by PUT; nothing is created.
    for r in (
        client.post("/v1/topics/billing-eu/messages", json={"body": "x"}, headers=bearer(BILLING)),
        client.put("/v1/topics/billing-eu", json={"queues": 2}, headers=bearer(BILLING)),
    ):
        body = problem(r, 403, "FORBIDDEN")
        assert "billing" in body["detail"] and "CREATE" in body["detail"], body
    assert client.get("/v1/topics/billing-eu", headers=bearer(OPS)).status_code == 404
    # CREATE on team-*: a produce creates team-a, PUT creates team-b.
    assert client.post("/v1/topics/team-a/messages", json={"body": "x"}, headers=bearer(CREATOR)).status_code == 201
    assert client.put("/v1/topics/team-b", json={"queues": 2}, headers=bearer(CREATOR)).status_code == 201
    assert client.get("/v1/topics/team-b", headers=bearer(CREATOR)).json()["read_queues"] == 2
    # The same PUT again changes nothing and is answered; a change needs admin.
    same = client.put("/v1/topics/team-b", json={"queues": 2}, headers=bearer(CREATOR))
    assert same.status_code == 200 and same.json()["changed"] == {}, same.text
    problem(client.put("/v1/topics/team-b", json={"queues": 8}, headers=bearer(CREATOR)), 403, "FORBIDDEN")
    assert client.get("/v1/topics/team-b", headers=bearer(CREATOR)).json()["read_queues"] == 2
    problem(client.delete("/v1/topics/team-b", headers=bearer(CREATOR)), 403, "FORBIDDEN")
    # The more specific pattern without CREATE wins.
    problem(client.post("/v1/topics/team-fixed/messages", json={"body": "x"}, headers=bearer(CREATOR)), 403, "FORBIDDEN")
    assert client.put("/v1/topics/team-b", json={"queues": 8}, headers=bearer(OPS)).status_code == 200


def test_metrics_needs_a_token_unless_public(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker, _ = start_with_acl(make_broker, tmp_path)
    assert broker.client is not None
    problem(broker.client.get("/metrics"), 401, "UNAUTHENTICATED")
    assert broker.client.get("/metrics", headers=bearer(LIMITED)).status_code == 200
    assert broker.client.get("/healthz").status_code == 200 and broker.client.get("/readyz").status_code == 200
    public, _ = start_with_acl(make_broker, tmp_path, config="metrics_public = true\n", name="public")
    assert public.client is not None and public.client.get("/metrics").status_code == 200


def serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "app", "serve", "--port", "0", "--store", str(tmp_path / "s"), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)


def test_an_open_broker_refuses_a_non_loopback_address(tmp_path: Path) -> None:
    done = serve(tmp_path, "--host", "0.0.0.0")
    assert done.returncode == 3, done.stderr
    assert "without an ACL" in done.stderr and "--insecure-open" in done.stderr
    assert not (tmp_path / "s").exists()  # refused before the store was touched


def test_an_open_broker_warns(make_broker: MakeBroker) -> None:
    broker = make_broker(SMALL_STORE + SMALL_BROKER, args=["--host", "0.0.0.0", "--insecure-open"], process=True)  # its log
    assert broker.client is not None and broker.client.get("/v1/topics").status_code == 200
    assert "WARNING tidemq.app: no ACL (--acl)" in broker.log()


def test_a_bad_acl_file_refuses_the_start(tmp_path: Path) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text("[[accounts]]\nname = 'x'\n")
    done = serve(tmp_path, "--acl", str(acl))
    assert done.returncode == 3 and "token_sha256" in done.stderr, done.stderr


def test_acl_hash_prints_the_tokens_sha256() -> None:
    cmd = [sys.executable, "-m", "app", "acl", "hash"]
    by_arg = subprocess.run([*cmd, "s3cret"], cwd=ROOT, capture_output=True, text=True, check=True)
    by_stdin = subprocess.run(cmd, cwd=ROOT, input="s3cret\n", capture_output=True, text=True, check=True)
    assert by_arg.stdout == by_stdin.stdout == token_hash("s3cret") + "\n" == hashlib.sha256(b"s3cret").hexdigest() + "\n"


def test_the_spec_declares_the_bearer_scheme(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker, _ = start_with_acl(make_broker, tmp_path)
    spec = httpx.get(broker.url + "/openapi.json", headers=bearer(BILLING)).json()
    assert spec["components"]["securitySchemes"]["bearerAuth"] == {
        **spec["components"]["securitySchemes"]["bearerAuth"],
        "type": "http",
        "scheme": "bearer",
    }
    assert spec["security"] == [{"bearerAuth": []}]
    assert spec["paths"]["/healthz"]["get"]["security"] == []
    assert "401" in spec["paths"]["/v1/topics/{topic}/messages"]["post"]["responses"]


def test_a_generated_client_sends_the_token(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker, _ = start_with_acl(make_broker, tmp_path)
    create_topics(broker, "billing-sdk")
    out = tmp_path / "client"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(bin_dir / "openapi-python-client"), "generate", "--path", str(ROOT / "openapi" / "openapi.json"), "--output-path", str(out)]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(out))
    try:
        client_module = importlib.import_module("tidemq_client")
        produce = importlib.import_module("tidemq_client.api.produce.produce")
        models = importlib.import_module("tidemq_client.models")
        # The spec's bearer scheme makes the generator offer AuthenticatedClient, which sends the token.
        with client_module.AuthenticatedClient(base_url=broker.url, token=BILLING, timeout=httpx.Timeout(15.0)) as authed:
            sent = produce.sync("billing-sdk", client=authed, body=models.ProduceMessage(body="from the sdk"))
        assert isinstance(sent, models.SendResult), sent
        with client_module.Client(base_url=broker.url, timeout=httpx.Timeout(15.0)) as anonymous:
            refused = produce.sync_detailed("billing-sdk", client=anonymous, body=models.ProduceMessage(body="x"))
        assert refused.status_code == 401
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == "tidemq_client" or m.startswith("tidemq_client.")]:
            del sys.modules[name]


def test_acl_and_insecure_open_from_options_and_environment(tmp_path: Path) -> None:
    from app.cli import parser, settings_from

    acl = tmp_path / "acl.toml"
    by_env = settings_from(parser().parse_args(["serve"]), {"TIDEMQ_ACL": str(acl), "TIDEMQ_INSECURE_OPEN": "true"})
    assert (by_env.acl_file, by_env.insecure_open) == (str(acl), True)
    by_option = settings_from(parser().parse_args(["serve", "--acl", "x.toml", "--insecure-open"]), {"TIDEMQ_ACL": str(acl)})
    assert (by_option.acl_file, by_option.insecure_open) == ("x.toml", True)
    assert settings_from(parser().parse_args(["serve"]), {}).insecure_open is False
    with pytest.raises(ConfigInvalid, match="TIDEMQ_INSECURE_OPEN"):
        settings_from(parser().parse_args(["serve"]), {"TIDEMQ_INSECURE_OPEN": "maybe"})
