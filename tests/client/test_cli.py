"""The `tidemq` client commands end to end: subprocesses against a real broker on loopback."""

from __future__ import annotations

import datetime
import json
import re
import shlex
import subprocess
import sys
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from tests.app.conftest import ROOT, BrokerProcess
from tests.client.cli_helpers import COMMAND_TIMEOUT_S, Done, command_env, tidemq
from tests.client.cli_helpers import start as start_command
from tests.loopback import free_port
from tests.waiting import wait_for
from tidemq import Client


@pytest.fixture
def url(shared_broker: BrokerProcess) -> str:
    return shared_broker.url


def create(url: str, topic: str, queues: int = 4) -> None:
    with Client(url) as c:
        c.create_topic(topic, queues)


def as_json(done: Done) -> list[dict[str, Any]]:
    return [json.loads(line) for line in done.lines()]


def test_version_prints_the_package_version() -> None:
    done = tidemq("http://127.0.0.1:1", "--version")
    assert done.returncode == 0 and done.stdout.decode().strip() == f"tidemq {version('tidemq')}"


def test_produce_stdin_lines_with_key_tag_and_queue(url: str, topic: str) -> None:
    create(url, topic)
    sent = tidemq(url, "produce", topic, "--key", "k1", "--key", "k2", "--tag", "created", "--queue", "2", stdin=b"one\ntwo\n\nthree")
    assert sent.returncode == 0 and sent.stderr.strip() == f"tidemq: produced 3 messages to {topic}"
    got = as_json(tidemq(url, "consume", topic, "--from-beginning", "--format", "json"))
    assert [m["body"] for m in got] == ["one", "two", "three"]  # the empty line is skipped; the last needs no newline
    assert {(m["queue_id"], m["tags"], tuple(m["keys"])) for m in got} == {(2, "created", ("k1", "k2"))}


def test_produce_batches_and_single_messages_alike(url: str, topic: str) -> None:
    create(url, topic)
    lines = b"".join(b"line %d\n" % i for i in range(250))
    assert tidemq(url, "produce", topic, "--queue", "0", "--batch", "100", stdin=lines).returncode == 0
    assert tidemq(url, "produce", topic, "--queue", "0", "--batch", "1", "-q", stdin=b"single 1\nsingle 2\n").returncode == 0
    out = tidemq(url, "consume", topic, "--from-beginning").lines()
    assert out == [f"line {i}" for i in range(250)] + ["single 1", "single 2"]


def test_produce_files_one_message_each_or_one_per_line(url: str, topic: str, tmp_path: Path) -> None:
    create(url, topic)
    (tmp_path / "a.bin").write_bytes(b"\x00\x01binary\nfile")
    (tmp_path / "b.txt").write_bytes(b"x\ny\n")
    assert tidemq(url, "produce", topic, "--queue", "1", str(tmp_path / "a.bin"), str(tmp_path / "b.txt")).returncode == 0
    assert tidemq(url, "produce", topic, "--queue", "1", "--lines", str(tmp_path / "b.txt")).returncode == 0
    raw = tidemq(url, "consume", topic, "--from-beginning", "--format", "raw").stdout
    assert raw == b"\x00\x01binary\nfile" + b"x\ny\n" + b"x" + b"y"
    missing = tidemq(url, "produce", topic, str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_delay_ms_holds_the_message_back(url: str, topic: str) -> None:
    # 8 s: two CLI starts must fit before it (a loaded machine takes seconds to start one).
    create(url, topic, 1)
    assert tidemq(url, "produce", topic, "--queue", "0", "--delay-ms", "8000", stdin=b"later\n").returncode == 0
    assert tidemq(url, "consume", topic, "--from-beginning").stdout == b""  # not delivered yet
    follow = tidemq(url, "consume", topic, "--from-beginning", "--follow", "--wait-ms", "5000", "--max-messages", "1", "--format", "json")
    assert follow.returncode == 0
    (message,) = as_json(follow)
    assert message["body"] == "later" and "TIMER_OUT_MS" in message["properties"]


def test_consume_positions_offset_since_and_max(url: str, topic: str) -> None:
    with Client(url) as c:
        c.create_topic(topic, 1)
        for i in range(5):
            c.produce(topic, f"m{i}", queue_id=0)
        stored = c.pull(topic, 0, 0).messages
    assert tidemq(url, "consume", topic, "--offset", "3").lines() == ["m3", "m4"]
    assert tidemq(url, "consume", topic, "--from-beginning", "--max-messages", "2").lines() == ["m0", "m1"]
    assert tidemq(url, "consume", topic).lines() == []  # by default only what arrives from now on
    since = datetime.datetime.fromtimestamp(stored[2].store_timestamp / 1000, datetime.UTC).isoformat()
    assert tidemq(url, "consume", topic, "--since", since).lines()[-1] == "m4"
    assert tidemq(url, "consume", topic, "--since", str(stored[4].store_timestamp + 60_000)).lines() == []
    bad = tidemq(url, "consume", topic, "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr


def held_pulls(broker: BrokerProcess) -> int:
    assert broker.client is not None
    metrics = broker.client.get("/metrics").text
    sample = re.search(r"^tidemq_held_pulls (\S+)$", metrics, re.M)
    assert sample is not None, metrics
    return int(float(sample.group(1)))


def test_consume_follow_waits_for_new_messages(shared_broker: BrokerProcess, url: str, topic: str) -> None:
    with Client(url) as c:
        c.create_topic(topic, 2)
        before = held_pulls(shared_broker)
        follower = start_command(url, "consume", topic, "--follow", "--wait-ms", "4000", "--max-messages", "3")
        try:
            # Produce only once both queues' long polls are held, so "from now on" is before the messages.
            wait_for(lambda: held_pulls(shared_broker) >= before + 2, COMMAND_TIMEOUT_S, what="both long polls to be held", poll_s=0.05)
            c.produce_batch(topic, [b"f1", b"f2"], queue_id=0)
            c.produce(topic, b"f3", queue_id=1)
            out, err = follower.communicate(timeout=COMMAND_TIMEOUT_S)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.communicate()
    assert follower.returncode == 0, err
    assert sorted(out.decode().splitlines()) == ["f1", "f2", "f3"]


def test_consume_as_a_group_receives_acks_and_resumes(url: str, topic: str) -> None:
    group = "cg-" + uuid.uuid4().hex[:8]
    with Client(url) as c:
        c.create_topic(topic, 4)
        c.produce_batch(topic, [b"g1", b"g2", b"g3"], queue_id=0)
    first = tidemq(url, "consume", topic, "--group", group, "--max-messages", "2")
    assert first.returncode == 0 and first.lines() == ["g1", "g2"]
    assert tidemq(url, "consume", topic, "--group", group).lines() == ["g3"]
    assert tidemq(url, "consume", topic, "--group", group).lines() == []  # every one was acked
    with Client(url) as c:
        (info,) = [g for g in c.groups() if g["group"] == group]
        assert info["topics"][0]["acked"] == 3 and info["topics"][0]["in_flight"] == 0
    clash = tidemq(url, "consume", topic, "--group", group, "--from-beginning")
    assert clash.returncode == 2  # a group keeps its own position


def test_topics_groups_offsets_and_lookup(url: str, topic: str) -> None:
    created = tidemq(url, "topics", "create", topic, "--queues", "2", "--format", "json")
    assert created.returncode == 0 and json.loads(created.stdout)["read_queues"] == 2
    assert any(line.split()[0] == topic for line in tidemq(url, "topics").lines()[1:])
    shown = tidemq(url, "topics", "show", topic).lines()
    assert shown[0].split() == ["TOPIC", "READ_QUEUES", "WRITE_QUEUES", "PERM"] and shown[1].split() == [topic, "2", "2", "rw"]
    assert tidemq(url, "produce", topic, "--queue", "1", "--key", "order-9", stdin=b"needle\n").returncode == 0
    found = as_json(tidemq(url, "lookup", topic, "--key", "order-9"))
    assert [m["body"] for m in found] == ["needle"]
    assert tidemq(url, "lookup", "--id", found[0]["offset_msg_id"], "--format", "lines").lines() == ["needle"]
    group = "adm-" + uuid.uuid4().hex[:8]
    offsets = tidemq(url, "offsets", group, topic, "--commit", "1", "1")
    assert offsets.returncode == 0 and offsets.lines()[2].split() == ["1", "1", "0", "1", "0"]
    assert [q["committed_offset"] for q in json.loads(tidemq(url, "offsets", group, topic, "--format", "json").stdout)] == [-1, 1]
    assert any(line.split()[:2] == [group, topic] for line in tidemq(url, "groups").lines())
    assert tidemq(url, "topics", "delete", topic).returncode == 0
    gone = tidemq(url, "topics", "show", topic)
    assert gone.returncode == 1 and gone.stderr.startswith("tidemq: 404 TOPIC_NOT_FOUND: ")


def test_per_line_keys_properties_and_a_format_string_as_kcat_spells_them(url: str, topic: str) -> None:
    create(url, topic, 2)
    lines = b"k1:order 1\nk2:order 2:paid\nno key here\n:empty key\n"
    sent = tidemq(url, "produce", topic, "-K", ":", "-H", "region=eu", "-H", "tier=1", "-p", "0", stdin=lines)
    assert sent.returncode == 0, sent.stderr
    out = tidemq(url, "consume", topic, "-o", "beginning", "-f", "%t %p %o [%k] %s {%h}\n")
    assert out.lines() == [
        f"{topic} 0 0 [k1] order 1 {{region=eu,tier=1}}",
        f"{topic} 0 1 [k2] order 2:paid {{region=eu,tier=1}}",  # split at the first delimiter only
        f"{topic} 0 2 [] no key here {{region=eu,tier=1}}",
        f"{topic} 0 3 [] empty key {{region=eu,tier=1}}",
    ]
    last_two = as_json(tidemq(url, "consume", topic, "-o", "-2", "-J"))  # 2 before the end of each queue, JSON with metadata
    assert [(m["queue_offset"], m["body"], m["properties"]) for m in last_two] == [
        (2, "no key here", {"region": "eu", "tier": "1"}),
        (3, "empty key", {"region": "eu", "tier": "1"}),
    ]
    assert tidemq(url, "consume", topic, "--since", "10m", "-c", "1").lines() == ["order 1"]
    assert tidemq(url, "consume", topic, "-o", "end").lines() == []
    bad = tidemq(url, "consume", topic, "-o", "yesterday")
    assert bad.returncode == 2 and "-o/--offset" in bad.stderr
    reserved = tidemq(url, "produce", topic, "-H", "KEYS=x", stdin=b"x\n")
    assert reserved.returncode == 1 and "PROPERTIES_INVALID" in reserved.stderr


def test_groups_describe_reset_delete_and_dead_letters(url: str, topic: str) -> None:
    group = "dl-" + uuid.uuid4().hex[:8]
    with Client(url) as c:
        c.create_topic(topic, 1)
        c.configure_group(group, max_reconsume_times=0)
        c.produce_batch(topic, [b"poison", b"fine"], queue_id=0)
        poison, fine = c.receive(group, topic, max_messages=2, invisible_ms=1000)
        c.ack(group, topic, [fine.receipt_handle or ""])
        # Not acked, no redelivery allowed: dead-lettered.
        wait_for(lambda: c.group(group)["dead_letters"] >= 1, COMMAND_TIMEOUT_S, what="the dead letter", poll_s=0.1)
    listed = tidemq(url, "dlq", "list", group, "-f", "%o %s %h\n").lines()
    assert len(listed) == 1 and listed[0].startswith("0 poison ") and f"RETRY_TOPIC={topic}" in listed[0], listed
    resent = tidemq(url, "dlq", "resend", group, "--all")
    assert resent.returncode == 0 and "sent 1 dead letter back" in resent.stderr, resent.stderr
    assert tidemq(url, "consume", topic, "--group", group).lines() == ["poison"]  # received again, and acked
    assert all(line.split()[0] != f"%DLQ%{group}" for line in tidemq(url, "topics").lines())  # internal topics hidden
    kinds = {line.split()[0]: line.split()[-1] for line in tidemq(url, "topics", "-i").lines()[1:]}
    assert kinds[f"%DLQ%{group}"] == "dead_letter" and kinds[f"%RETRY%{group}_{topic}"] == "retry" and kinds[topic] == "user"
    described = tidemq(url, "groups", "describe", group).stdout.decode()
    assert f"DEAD_LETTERS 1 (%DLQ%{group})" in described and "tidemq-client/" in described  # its consumer
    plan = tidemq(url, "groups", "reset", group, topic, "--to-earliest", "--dry-run")
    assert plan.lines()[1].split() == ["0", "2", "0", "2"] and "nothing committed" in plan.stderr
    assert tidemq(url, "groups", "reset", group, topic, "--to-earliest").returncode == 0
    assert tidemq(url, "consume", topic, "--group", group).lines() == ["poison", "fine"]  # from the start again
    assert tidemq(url, "groups", "delete", group).returncode == 0
    gone = tidemq(url, "groups", "describe", group)
    assert gone.returncode == 1 and "404 NOT_FOUND" in gone.stderr


def test_errors_are_one_line_with_a_documented_exit_status(url: str) -> None:
    unreachable = tidemq(f"http://127.0.0.1:{free_port()}", "topics")
    assert unreachable.returncode == 4 and unreachable.stderr.startswith("tidemq: CONNECT_FAILED: ")
    bad_url = tidemq("ftp://127.0.0.1", "topics")
    assert bad_url.returncode == 2 and bad_url.stderr.count("\n") == 1
    refused = tidemq(url, "produce", "bad topic!", stdin=b"x\n")
    assert refused.returncode == 1 and refused.stderr.startswith("tidemq: 400 TOPIC_INVALID: ")
    flag_wins = tidemq("ftp://wrong", "topics", "--url", url)
    assert flag_wins.returncode == 0


def test_serve_is_still_a_command() -> None:
    helped = tidemq("http://127.0.0.1:1", "serve", "--help")
    assert helped.returncode == 0 and b"--store" in helped.stdout


def test_a_closed_stdout_ends_consume_quietly(url: str, topic: str, tmp_path: Path) -> None:
    with Client(url) as c:
        c.create_topic(topic, 1)
        c.produce_batch(topic, [f"p{i}".encode() for i in range(200)], queue_id=0)
    command = shlex.join([sys.executable, "-m", "app", "consume", topic, "--from-beginning"])
    err = shlex.quote(str(tmp_path / "consume.err"))
    script = f"{command} 2>{err} | head -1; echo status=${{PIPESTATUS[0]}}; cat {err}"
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=command_env(url, None), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "p0" and lines[1] == "status=0" and lines[2:] == [], done.stdout
