"""The process's open-file limit: raised to its hard limit at start-up, both values logged.

Every mapped store file and every connection holds a file descriptor; a soft limit left at a
distribution's default (often 1024) is reached long before the hard limit.
"""

from __future__ import annotations

import logging
import resource

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
