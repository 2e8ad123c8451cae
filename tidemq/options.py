"""What both clients are built from: the broker's URL, the token and the limits, checked once."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from tidemq.version import __version__

DEFAULT_URL = "http://127.0.0.1:8080"
# A request's longest wait for its reply, beyond the time the broker holds it on purpose (long polls).
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0
# Requests under way at once (and so connections kept).
DEFAULT_MAX_CONNECTIONS = 16
# Idle connections older than this are not reused: below the broker's keep_alive_timeout_s (5 s).
DEFAULT_IDLE_EXPIRY_S = 4.0
# Retries of NO_MASTER, FORWARD_FAILED and NOT_ENOUGH_REPLICAS (tidemq.failover): the first pause, the longest,
# and the longest a call may go on retrying (a failover takes a lease TTL, 5 s by default, and an election).
DEFAULT_RETRY_BACKOFF_MIN_S = 0.05
DEFAULT_RETRY_BACKOFF_MAX_S = 1.0
DEFAULT_RETRY_TOTAL_S = 15.0
# How long a stream may be silent (the broker sends a heartbeat every stream_heartbeat_ms, 15 s).
DEFAULT_STREAM_IDLE_S = 60.0


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    ssl_context: ssl.SSLContext | None

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        default = 443 if self.ssl_context is not None else 80
        return host if self.port == default else f"{host}:{self.port}"


def parse_url(url: str, verify: bool | str = True) -> Endpoint:
    """`http://host[:port]` or `https://...`; ValueError for anything else (a path, credentials)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the broker URL must be http://host[:port] or https://host[:port], not {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.username or parts.password:
        raise ValueError(f"the broker URL takes no path, query or credentials: {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise ValueError(f"bad port in {url!r}") from e
    context: ssl.SSLContext | None = None
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else ssl.create_default_context()
        if verify is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    return Endpoint(parts.hostname, port, context)


def base_headers(token: str | None) -> dict[str, str]:
    """Headers of every request; ValueError for a token that could not be sent as one header value."""
    headers = {"user-agent": f"tidemq-client/{__version__}"}
    if token:
        if not all("!" <= c <= "~" for c in token):
            raise ValueError("a token is printable ASCII without spaces")
        headers["authorization"] = f"Bearer {token}"
    return headers


def check_limits(timeout_s: float, max_connections: int) -> None:
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, not {timeout_s}")
    if not 1 <= max_connections <= 10_000:
        raise ValueError(f"max_connections must be in 1..10000, not {max_connections}")
