"""An open broker (no ACL) stays on loopback unless `insecure_open` says otherwise."""

from __future__ import annotations

import ipaddress
import logging

from app.problems import StartRefused
from app.settings import BrokerSettings

log = logging.getLogger("tidemq.app")
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name that resolves elsewhere (or anywhere): not provably loopback


def check_exposure(settings: BrokerSettings) -> None:
    """StartRefused when an open broker would listen beyond loopback."""
    if not settings.acl_file and not is_loopback(settings.host) and not settings.insecure_open:
        raise StartRefused(
            f"refusing to listen on {settings.host} without an ACL: anyone who reaches it could produce, consume and "
            "delete topics; give --acl FILE (see docs/security.md) or, on a trusted network, --insecure-open"
        )


def warn_if_open(settings: BrokerSettings) -> None:
    """The WARNING of an open broker, once it is sure to serve (a refused start prints one line only)."""
    if not settings.acl_file:
        log.warning("no ACL (--acl): every request is served without a token; see docs/security.md")
