"""Test certificates made with the `openssl` command (the commands docs/tls.md shows): a server CA and a
server certificate for 127.0.0.1/localhost, a client CA with a client certificate, and a client
certificate from a CA nobody trusts."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(root: Path, name: str) -> tuple[Path, Path]:
    key, cert = root / f"{name}.key", root / f"{name}.crt"
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", DAYS,
         "-subj", f"/CN=tidemq test {name}", "-keyout", key.name, "-out", cert.name, cwd=root)  # fmt: skip
    return cert, key


def make_signed(root: Path, name: str, ca: tuple[Path, Path], extension: str) -> tuple[Path, Path]:
    """A certificate for `name` signed by `ca`, with `extension` lines (SAN, key usage) added."""
    key, csr, cert, ext = root / f"{name}.key", root / f"{name}.csr", root / f"{name}.crt", root / f"{name}.ext"
    ext.write_text(extension)
    _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={name}",
         "-keyout", key.name, "-out", csr.name, cwd=root)  # fmt: skip
    _run("x509", "-req", "-in", csr.name, "-CA", ca[0].name, "-CAkey", ca[1].name, "-CAcreateserial", "-days", DAYS,
         "-extfile", ext.name, "-out", cert.name, cwd=root)  # fmt: skip
    return cert, key


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_ca: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


def make_certs(root: Path) -> Certs:
    root.mkdir(parents=True, exist_ok=True)
    ca = make_ca(root, "ca")
    server = make_signed(root, "server", ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    client_ca = make_ca(root, "client-ca")
    client = make_signed(root, "client", client_ca, "extendedKeyUsage=clientAuth\n")
    stranger_ca = make_ca(root, "stranger-ca")
    stranger = make_signed(root, "stranger", stranger_ca, "extendedKeyUsage=clientAuth\n")
    return Certs(ca[0], *server, client_ca[0], *client, *stranger)
