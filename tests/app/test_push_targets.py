"""Push targets and signatures without a broker: which hosts an allow list admits, which URLs are
refused, how TIDEMQ_PUSH_ALLOWED_HOSTS and [broker] push_allowed_hosts are read, and that a
signature checks only for its secret, its body and a time near the receiver's clock."""

from __future__ import annotations

import pytest

from app.cli import parser, settings_from
from app.push_signature import signature, verify
from app.push_targets import host_allowed, origin_of, url_problem
from app.settings import build_settings
from core import ConfigInvalid


@pytest.mark.parametrize(
    ("host", "allowed", "admitted"),
    [
        ("127.0.0.1", ["127.0.0.1"], True),
        ("127.0.0.2", ["127.0.0.1"], False),
        ("Hooks.Example.com", ["hooks.example.com"], True),
        ("a.hooks.example.com", ["hooks.example.com"], False),
        ("a.example.com", ["*.example.com"], True),
        ("a.b.example.com", ["*.example.com"], True),
        ("example.com", ["*.example.com"], False),
        ("evilexample.com", ["*.example.com"], False),
        ("127.0.0.1.example.com", ["127.0.0.1"], False),
        ("::1", ["0:0:0:0:0:0:0:1"], True),
        ("localhost", [], False),
    ],
)
def test_host_allowed(host: str, allowed: list[str], admitted: bool) -> None:
    assert host_allowed(host, allowed) is admitted


@pytest.mark.parametrize(
    "url",
    [
        "ftp://h/",
        "http://",
        "/relative",
        "http://u:p@h/",
        "http://h/#f",
        "http://h:70000/",
        "http://h/a b",
        "http://h/\x00",
        "http://h/caf\u00e9",
        "http://h/" + "a" * 2050,
    ],
)
def test_urls_a_push_target_cannot_have(url: str) -> None:
    assert url_problem(url) is not None


def test_accepted_urls_and_their_origins() -> None:
    for url in ("http://127.0.0.1:9000/hook?x=1", "https://hooks.example.com/a", "http://[::1]:81/"):
        assert url_problem(url) is None, url
    assert origin_of("https://hooks.example.com/a") == ("https", "hooks.example.com", 443)
    assert origin_of("http://[::1]:81/") == ("http", "::1", 81)


def test_the_allow_list_from_the_environment_wins_over_the_file_and_bad_entries_refuse_the_start() -> None:
    args = parser().parse_args(["serve"])
    assert settings_from(args, {}).push_allowed_hosts == []
    settings = settings_from(args, {"TIDEMQ_PUSH_ALLOWED_HOSTS": " 127.0.0.1, *.example.com ,,"})
    assert settings.push_allowed_hosts == ["127.0.0.1", "*.example.com"]
    assert build_settings({"broker": {"push_allowed_hosts": ["10.0.0.7"]}}, {}).push_allowed_hosts == ["10.0.0.7"]
    for bad in (["bad host"], ["http://x"], "127.0.0.1", [7]):
        with pytest.raises(ConfigInvalid, match="push_allowed_hosts"):
            build_settings({"broker": {"push_allowed_hosts": bad}}, {})


def test_a_signature_checks_only_for_its_secret_body_and_a_recent_time() -> None:
    header = signature("s3cret-s3cret-s3cret", b"body", 1_000_000)
    assert header.startswith("t=1000000,v1=") and len(header.split("v1=")[1]) == 64
    assert verify("s3cret-s3cret-s3cret", b"body", header, 1_000_000 + 299_000)
    assert not verify("s3cret-s3cret-s3cret", b"body", header, 1_000_000 + 301_000)  # too old: a replay
    assert not verify("another-secret-here!", b"body", header, 1_000_000)
    assert not verify("s3cret-s3cret-s3cret", b"bodY", header, 1_000_000)
    moved = header.replace("t=1000000", "t=1000001")  # the time is signed too
    assert not verify("s3cret-s3cret-s3cret", b"body", moved, 1_000_000)
    assert not verify("s3cret-s3cret-s3cret", b"body", "garbage", 1_000_000)
