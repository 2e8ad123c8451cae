"""The exceptions of replication: expected conditions of a connection, never programmer errors."""

from __future__ import annotations

from core import TidemqError


class HAError(TidemqError):
    """Raised when replication cannot go on; the base of every replication error."""


class HAStartFailed(HAError):
    """Raised when the master cannot listen on its HA port (in use, not permitted) or the settings are unusable."""


class ConnectionLost(HAError):
    """Raised when the peer closed the connection, went silent past the housekeeping interval, or the node is stopping."""


class ProtocolViolation(HAError):
    """Raised when the peer sent bytes that break the protocol (bad magic, oversized or misplaced frame)."""


class HandshakeRefused(HAError):
    """Raised on a slave when the master refused its handshake (diverged log or incompatible settings).

    `verdict` is the master's verdict name; the slave stops replicating and reports `reason`.
    """

    def __init__(self, verdict: str, reason: str) -> None:
        super().__init__(f"{verdict}: {reason}")
        self.verdict = verdict
        self.reason = reason


class AuthRefused(HAError):
    """Raised on the master when a peer did not prove it knows `ha_secret` (or offered one the master lacks)."""


class TLSFailed(ProtocolViolation):
    """Raised when the TLS handshake of the HA link fails (no or an untrusted certificate, plain TCP, wrong name)."""
