"""The HA link with TLS, mutual TLS and ha_secret, between real master and slave processes."""

from __future__ import annotations

import re
import shutil
import socket
import ssl
from collections.abc import Callable

import pytest

from tests.ha.cluster import Node
from tests.loopback import read_until_closed
from tests.tls_certs import Certs, make_certs
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]
SECRET = "a shared secret of the cluster"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_args(certs: Certs) -> list[str]:
    """Mutual TLS for HTTP and the HA link; one CA signs every broker's certificate and verifies its peers."""
    return ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key), "--tls-client-ca", str(certs.ca)]


def tls_client(certs: Certs) -> dict[str, object]:
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.server_cert), str(certs.server_key))  # its EKU allows client use too
    return {"verify": context}


def metric(node: Node, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", node.client.get("/metrics").text, re.M)
    assert match, name
    return float(match.group(1))


def test_mutual_tls_and_the_secret_replicate_and_refuse_strangers(cluster: Callable[..., Node], certs: Certs) -> None:
    secure = {"extra_args": tls_args(certs), "extra_config": f'\n[ha]\nha_secret = "{SECRET}"\n', "client_options": tls_client(certs)}
    master = cluster("master", "master", **secure)
    bodies = [f"tls-{i}-" + "y" * (i % 300) for i in range(200)]
    for body in bodies:
        assert master.produce("secured", body).status_code == 201
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}", **secure)
    wait_for(lambda: slave.max_offset() == master.max_offset(), what="the slave over TLS to catch up")
    assert slave.pull_all("secured", 0, len(bodies)) == bodies
    status = master.ha()
    assert status["tls"] is True and status["authenticated"] is True and status["auth_refused_total"] == 0
    assert slave.ha()["connection_state"] == "streaming"
    assert slave.ha()["master_http_address"].startswith("https://")

    # A plain TCP peer on the TLS HA port: dropped during the TLS handshake, counted, nothing leaks.
    with socket.create_connection(("127.0.0.1", master.ha_port), timeout=5) as sock:
        sock.sendall(b"TMQS" + b"\x00" * 34)
        received = read_until_closed(sock)
        assert b"tls-" not in received and b"TMQ" not in received
    # A TLS peer without a client certificate: refused by mutual TLS.
    no_cert = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", master.ha_port), timeout=5) as raw:
        try:
            with no_cert.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"TMQA" + b"\x00" * 32)
                assert b"tls-" not in tls.recv(65536)  # TLS 1.3 reports the refused certificate on the first read
        except (ssl.SSLError, ConnectionResetError):
            pass
    wait_for(lambda: master.ha()["auth_refused_total"] == 2, what="both strangers counted")
    assert metric(master, "tidemq_ha_auth_refused_total") == 2
    assert master.produce("secured", "after strangers").status_code == 201
    wait_for(lambda: slave.max_offset() == master.max_offset(), what="replication to go on")


def test_a_slave_with_the_wrong_secret_gets_nothing_and_is_counted(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master", extra_config=f'\n[ha]\nha_secret = "{SECRET}"\n')
    assert master.produce("t", "secret data").status_code == 201
    wrong = cluster("wrong", "slave", master_ha=f"127.0.0.1:{master.ha_port}", extra_config='\n[ha]\nha_secret = "some other secret!!"\n')
    wait_for(lambda: master.ha()["auth_refused_total"] >= 1, what="the wrong secret refused")
    assert "wrong HMAC" in master.ha()["last_auth_refusal"]["reason"]
    wait_for(lambda: wrong.ha()["last_error"], what="the slave to say why")
    assert "ha_secret" in wrong.ha()["last_error"] and wrong.max_offset() == 0
    none = cluster("none", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    wait_for(lambda: none.ha()["last_error"] and "requires ha_secret" in none.ha()["last_error"], what="the slave without a secret told")
    assert none.max_offset() == 0 and master.ha()["refused_total"] == 0
    right = cluster("right", "slave", master_ha=f"127.0.0.1:{master.ha_port}", extra_config=f'\n[ha]\nha_secret = "{SECRET}"\n')
    wait_for(lambda: right.max_offset() == master.max_offset(), what="the slave with the secret to replicate")
    assert right.pull_all("t", 0, 1) == ["secret data"]
