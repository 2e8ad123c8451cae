"""Start-up: the port is bound before the store is touched, and the store loads while health answers.

Invariants:
- `bind_listener` binds and listens on the HTTP port before the store is locked or loaded, so
  a busy port is refused in a second, not after a recovery of minutes; every refusal of the
  start is a StartRefused with a one-line message (the CLI prints it and exits 3).
- While the store loads (off the event loop), `StartupGate` answers every request but /healthz
  and /readyz with 503 STARTING; /readyz answers 503 STARTING with the recovery's progress.
- `recovery_progress` reads the store's progress when the store offers it (another part of the
  store reports it), and says only the phase otherwise.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from app.problems import ProblemReply, StartRefused
from store import MessageStore

# Paths served while the store loads.
SERVED_WHILE_STARTING = frozenset({"/healthz", "/readyz"})


def bind_listener(host: str, port: int, backlog: int) -> socket.socket:
    """A listening socket on host:port; StartRefused (one line) when it cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise StartRefused(f"cannot resolve the listen address {host!r}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        why = "it is in use by another process" if e.errno == errno.EADDRINUSE else e.strerror
        raise StartRefused(f"cannot listen on {host}:{port}: {why}") from None
    sock.set_inheritable(True)
    return sock


def recovery_progress(store: MessageStore) -> dict[str, Any]:
    """The store's recovery progress: phase, bytes scanned and bytes to scan."""
    return dict(store.recovery_progress())


class StartupGate:
    """ASGI middleware answering 503 STARTING while `is_starting()` holds, except the health paths."""

    def __init__(self, app: ASGIApp, broker: Any, problem: ProblemReply) -> None:
        self.app = app
        self.broker = broker
        self.problem = problem

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.broker.loading and scope["type"] == "http" and scope["path"] not in SERVED_WHILE_STARTING:
            detail = "the store is being loaded and recovered; see /readyz for the progress"
            await self.problem("STARTING", detail, scope["path"], None)(scope, receive, send)
            return
        await self.app(scope, receive, send)
