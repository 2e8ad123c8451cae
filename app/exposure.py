"""An open broker (no ACL) stays on loopback unless `insecure_open` says otherwise; a replication port
without `ha_secret` stays on loopback, always (ha.HASettings.exposure_problem)."""

from __future__ import annotations

import logging

from app.problems import StartRefused
from app.settings import BrokerSettings
from ha import is_loopback

log = logging.getLogger("tidemq.app")


def check_exposure(settings: BrokerSettings) -> None:
    """StartRefused when an open broker would listen beyond loopback, or a master's (or a cluster member's,
    which listens once elected) replication port would without ha_secret."""
    if settings.ha.role == "master" or settings.cluster.enabled:
        refusal = settings.ha.exposure_problem()
        if refusal is not None:
            raise StartRefused(refusal)
    if not settings.acl_file and not is_loopback(settings.host) and not settings.insecure_open:
        raise StartRefused(
            f"refusing to listen on {settings.host} without an ACL: anyone who reaches it could produce, consume and "
            "delete topics; give --acl FILE (see docs/security.md) or, on a trusted network, --insecure-open"
        )


def warn_if_open(settings: BrokerSettings) -> None:
    """The WARNING of an open broker, once it is sure to serve (a refused start prints one line only)."""
    if not settings.acl_file:
        log.warning("no ACL (--acl): every request is served without a token; see docs/security.md")
