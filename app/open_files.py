"""The process's open-file limit: raised to its hard limit at start-up, both values logged.

Every mapped store file and every connection holds a file descriptor; a soft limit left at a
distribution's default (often 1024) is reached long before the hard limit.

`fit_descriptors` makes the connection bounds the ones that answer: a process out of
descriptors cannot accept, so clients past the limit got resets instead of a 503 (issue:
`max_held_pulls` was never reached). When even the hard limit cannot hold `max_connections`
plus `reserved_fds`, the connection, held-pull and event-stream bounds are lowered to what fits
and the start logs it at WARNING.
"""

from __future__ import annotations

import logging
import resource

from app.settings import BrokerSettings

log = logging.getLogger("tidemq.app")


def raise_open_files_limit() -> tuple[int, int]:
    """Set the soft RLIMIT_NOFILE to the hard limit; returns (soft, hard) as they are afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
            return soft, hard
        log.info("open-file limit raised from %d to the hard limit %d", soft, hard)
        return hard, hard
    log.info("open-file limit: soft %d, hard %d", soft, hard)
    return soft, hard


def fit_descriptors(settings: BrokerSettings) -> None:
    """Raise the soft descriptor limit to the hard one; lower the connection bounds when it cannot hold them."""
    soft, hard = raise_open_files_limit()
    need = settings.max_connections + settings.reserved_fds
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    connections = max(1, soft - settings.reserved_fds) if soft > 2 * settings.reserved_fds else max(1, soft // 2)
    held = min(settings.max_held_pulls, max(0, connections - max(1, connections // 10)))
    streams = min(settings.max_streams, max(0, connections - max(1, connections // 10)))
    log.warning(
        "descriptor limit %d (hard %s) cannot hold max_connections %d plus reserved_fds %d: "
        "serving at most %d connections, %d held pulls and %d event streams",
        soft,
        hard,
        settings.max_connections,
        settings.reserved_fds,
        connections,
        held,
        streams,
    )
    settings.max_connections = connections
    settings.max_held_pulls = held
    settings.max_streams = streams
