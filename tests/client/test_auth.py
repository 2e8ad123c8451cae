"""The client's bearer token against a broker with an ACL (tests/app/acl_fixtures.py): refusals
are typed with their codes; the CLI takes the token from --token or TIDEMQ_TOKEN."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.acl_fixtures import BILLING, OPS, create_topics, start_with_acl
from tests.app.conftest import BrokerProcess, MakeBroker
from tests.app.in_process import InProcessBroker
from tests.client.cli_helpers import tidemq
from tidemq import Client, Forbidden, Unauthenticated


@pytest.fixture
def acl_broker(make_broker: MakeBroker, tmp_path: Path) -> BrokerProcess | InProcessBroker:
    broker, _ = start_with_acl(make_broker, tmp_path)
    create_topics(broker, "billing-x", "billing-cli", "orders")
    return broker


def test_tokens_are_sent_and_refusals_carry_their_codes(acl_broker: BrokerProcess | InProcessBroker) -> None:
    with Client(acl_broker.url) as anonymous, pytest.raises(Unauthenticated) as e:
        anonymous.topics()
    assert (e.value.code, e.value.status) == ("UNAUTHENTICATED", 401)
    with Client(acl_broker.url, token="wrong-token") as wrong, pytest.raises(Unauthenticated):
        wrong.produce("billing-x", b"x")
    with Client(acl_broker.url, token=BILLING) as billing:
        assert billing.produce("billing-x", b"paid", queue_id=0).queue_offset == 0
        with pytest.raises(Forbidden) as denied:
            billing.produce("orders", b"x")
        assert (denied.value.code, denied.value.status) == ("FORBIDDEN", 403)
    with Client(acl_broker.url, token=OPS) as ops:
        assert "billing-x" in [t.topic for t in ops.topics()]


def test_the_cli_takes_the_token_from_the_flag_or_the_environment(acl_broker: BrokerProcess | InProcessBroker) -> None:
    refused = tidemq(acl_broker.url, "topics")
    assert refused.returncode == 1 and refused.stderr.startswith("tidemq: 401 UNAUTHENTICATED: ") and refused.stderr.count("\n") == 1
    bad = tidemq(acl_broker.url, "topics", "--token", "not-a-token")
    assert bad.returncode == 1 and "401 UNAUTHENTICATED" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    sent = tidemq(acl_broker.url, "produce", "billing-cli", "--queue", "0", stdin=b"one\n", env={"TIDEMQ_TOKEN": BILLING})
    assert sent.returncode == 0, sent.stderr
    read = tidemq(acl_broker.url, "consume", "billing-cli", "--from-beginning", "--token", BILLING)
    assert read.returncode == 0 and read.stdout == b"one\n"
    forbidden = tidemq(acl_broker.url, "produce", "orders", stdin=b"x\n", env={"TIDEMQ_TOKEN": BILLING})
    assert forbidden.returncode == 1 and "403 FORBIDDEN" in forbidden.stderr
