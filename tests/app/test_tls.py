"""HTTPS from outside: a real broker serving a certificate the test made with openssl, with and without mutual TLS."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import BrokerSettings, build_settings
from core import ConfigInvalid
from tests.app.conftest import ROOT, SMALL_BROKER, SMALL_STORE
from tests.app.in_process import InProcessBroker
from tests.loopback import read_until_closed
from tests.tls_certs import Certs, make_certs

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def tls_broker(tmp_path: Path, certs: Certs) -> Iterator[Callable[..., InProcessBroker]]:
    started: list[InProcessBroker] = []

    def make(mutual: bool = False, client_cert: tuple[Path, Path] | None = None) -> InProcessBroker:
        args = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
        if mutual:
            args += ["--tls-client-ca", str(certs.client_ca)]
        broker = InProcessBroker(tmp_path / f"store{len(started)}", SMALL_STORE + SMALL_BROKER, args)
        broker.scheme = "https"
        broker.client_options = {"verify": ssl.create_default_context(cafile=str(certs.ca))}
        if client_cert is not None:
            broker.client_options["verify"].load_cert_chain(str(client_cert[0]), str(client_cert[1]))
        started.append(broker)
        return broker.start()

    try:
        yield make
    finally:
        for broker in started:
            broker.kill()


def test_https_with_the_ca_serves_the_api(tls_broker: Callable[..., InProcessBroker], certs: Certs) -> None:
    broker = tls_broker()
    assert broker.client is not None
    assert broker.url.startswith("https://")
    assert broker.client.put("/v1/topics/tls-t", json={"queues": 1}).status_code == 201
    r = broker.client.post("/v1/topics/tls-t/messages", json={"body": "over tls", "queue_id": 0})
    assert r.status_code == 201, r.text
    r = broker.client.get("/v1/topics/tls-t/queues/0/messages", params={"offset": 0})
    assert r.status_code == 200 and r.json()["messages"][0]["body"] == "over tls"
    with pytest.raises(httpx.ConnectError):  # a client that does not trust the CA refuses the server
        httpx.get(f"{broker.url}/healthz", timeout=5)


def test_plain_http_to_the_tls_port_fails_cleanly_and_the_server_keeps_serving(
    tls_broker: Callable[..., InProcessBroker],
) -> None:
    broker = tls_broker()
    assert broker.client is not None
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{broker.port}/healthz", timeout=5)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = read_until_closed(sock)
        assert b"HTTP/1.1 200" not in reply, "plain HTTP must not be served on the TLS port"
    assert broker.client.get("/healthz").status_code == 200


def test_mutual_tls_refuses_a_client_without_a_certificate_and_accepts_one_signed_by_the_client_ca(
    tls_broker: Callable[..., InProcessBroker], certs: Certs
) -> None:
    broker = tls_broker(mutual=True, client_cert=(certs.client_cert, certs.client_key))
    assert broker.client is not None
    assert broker.client.get("/healthz").status_code == 200
    assert broker.client.put("/v1/topics/mtls", json={"queues": 1}).status_code == 201
    assert broker.client.post("/v1/topics/mtls/messages", json={"body": "b", "queue_id": 0}).status_code == 201
    no_cert = ssl.create_default_context(cafile=str(certs.ca))
    stranger = ssl.create_default_context(cafile=str(certs.ca))
    stranger.load_cert_chain(str(certs.stranger_cert), str(certs.stranger_key))
    for context in (no_cert, stranger):
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            with httpx.Client(verify=context, timeout=5) as other:
                other.get(f"{broker.url}/healthz")
    assert broker.client.get("/healthz").status_code == 200


def settings_with(**broker: object) -> BrokerSettings:
    return build_settings({"broker": broker}, {})


def test_unusable_tls_settings_are_refused_at_start_with_one_line(tmp_path: Path, certs: Certs) -> None:
    with pytest.raises(ConfigInvalid, match="both tls_cert_file and tls_key_file"):
        settings_with(tls_cert_file=str(certs.server_cert))
    with pytest.raises(ConfigInvalid, match="does not exist"):
        settings_with(tls_cert_file=str(tmp_path / "missing.crt"), tls_key_file=str(certs.server_key))
    with pytest.raises(ConfigInvalid, match="KEY_VALUES_MISMATCH|do not load"):
        settings_with(tls_cert_file=str(certs.server_cert), tls_key_file=str(certs.client_key))
    with pytest.raises(ConfigInvalid, match="needs tls_cert_file"):
        settings_with(tls_client_ca_file=str(certs.client_ca))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigInvalid, match="tls_client_ca_file"):
        settings_with(tls_cert_file=str(certs.server_cert), tls_key_file=str(certs.server_key), tls_client_ca_file=str(garbage))
    ok = settings_with(tls_cert_file=str(certs.server_cert), tls_key_file=str(certs.server_key))
    assert ok.ha.tls is not None and ok.ha.tls.cert_file == str(certs.server_cert)


def test_the_command_line_exits_2_naming_the_bad_tls_file(tmp_path: Path, certs: Certs) -> None:
    cmd = [sys.executable, "-m", "app", "serve", "--store", str(tmp_path / "s"), "--tls-cert", str(certs.server_cert)]
    done = subprocess.run([*cmd, "--tls-key", str(certs.client_key)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "tls_key_file" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    env_key = {"TIDEMQ_TLS_KEY": str(tmp_path / "nope.key"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env_key)
    assert done.returncode == 2 and "nope.key" in done.stderr, done.stderr


def test_the_openssl_commands_of_docs_tls_md_make_usable_files(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "tls.md").read_text()
    script = doc.split("## A test certificate with openssl", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    settings = settings_with(
        tls_cert_file=str(tmp_path / "broker.crt"), tls_key_file=str(tmp_path / "broker.key"), tls_client_ca_file=str(tmp_path / "ca.crt")
    )
    assert settings.ha.tls is not None
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client.load_cert_chain(str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
