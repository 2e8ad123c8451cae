"""TLSFiles: the certificate, key and client CA of `--tls-cert/--tls-key/--tls-client-ca`, as SSL contexts.

One set of files serves both listeners: uvicorn builds the HTTP side's context from the
paths, and the HA link uses `server_context()` (master) and `client_context()` (slave) below.
`check()` loads every file once at start so a missing file, a PEM that does not parse or a
key that does not belong to the certificate stops the broker with one line (ConfigInvalid),
not the first connection later. docs/tls.md says what this protects and what it does not.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass

from core import ConfigInvalid

# TLS 1.2 is the oldest version still without known protocol breaks; the peers are all tidemq.
MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2


@dataclass(frozen=True, slots=True)
class TLSFiles:
    cert_file: str
    key_file: str
    # Client certificates must be signed by this CA (mutual TLS); None accepts clients without one.
    client_ca_file: str | None = None
    # Slave side of the HA link: CA that signs the master's certificate; None: client_ca_file, else the system store.
    peer_ca_file: str | None = None

    def check(self) -> TLSFiles:
        """Load every file; ConfigInvalid naming the file and the reason when one is unusable."""
        for what, path in (("tls_cert_file", self.cert_file), ("tls_key_file", self.key_file)):
            if not os.path.isfile(path):
                raise ConfigInvalid(f"{what} {path!r} does not exist or is not a file")
        self.server_context()
        self.client_context()
        return self

    def server_context(self) -> ssl.SSLContext:
        """The listening side: presents the certificate; demands a client certificate when a client CA is set."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = MINIMUM_VERSION
        self._load_chain(context)
        if self.client_ca_file is not None:
            _load_ca(context, "tls_client_ca_file", self.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_context(self) -> ssl.SSLContext:
        """The slave's side of the HA link: verifies the master (name and CA) and presents its own certificate."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        context.minimum_version = MINIMUM_VERSION
        ca = self.peer_ca_file or self.client_ca_file
        if ca is not None:
            _load_ca(context, "ha_tls_ca_file" if self.peer_ca_file else "tls_client_ca_file", ca)
        self._load_chain(context)  # sent when the master asks for it (mutual TLS)
        return context

    def _load_chain(self, context: ssl.SSLContext) -> None:
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except ssl.SSLError as exc:
            raise ConfigInvalid(
                f"tls_cert_file {self.cert_file!r} and tls_key_file {self.key_file!r} do not load as a certificate "
                f"and its private key: {exc.reason or exc}"
            ) from None
        except OSError as exc:
            raise ConfigInvalid(f"cannot read the TLS certificate or key: {exc.strerror} ({exc.filename})") from None


def _load_ca(context: ssl.SSLContext, what: str, path: str) -> None:
    if not os.path.isfile(path):
        raise ConfigInvalid(f"{what} {path!r} does not exist or is not a file")
    try:
        context.load_verify_locations(cafile=path)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigInvalid(f"{what} {path!r} does not load as PEM CA certificates: {exc}") from None
