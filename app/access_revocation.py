"""Revocations: held requests and open event streams, by the access the gate granted them; an ACL reload
ends those the new ACL no longer grants.

The gate judges a request once, when it arrives. A held pull or receive lasts up to `max_wait_ms` and
an event stream for as long as its client reads, so each of them registers a `Watch` here (with the
account and the `Need` the gate put in the scope); when `AclSource` swaps in a new ACL, every watch is
judged again: an account whose token the new file no longer has is `UNAUTHENTICATED`, one that lost
the permission `FORBIDDEN`. The watch's future gets (code, detail) and its callback runs at once, on
the event loop (where the gate reloads), so nothing is delivered to a revoked stream after the
reload. Without an ACL nothing is watched.

A reload happens on the first request after the file changed (at most once per
`acl_reload_interval_ms`); a stream asks for one (`refresh`) before each read and at each
heartbeat, so a change is noticed even when no other request arrives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import Scope

from app.access_check import ACCOUNT_KEY, NEED_KEY
from app.access_rules import Need
from app.acl import Account, Acl

# (code, detail) of a revocation -> what the watcher does at once (on the loop).
OnRevoked = Callable[[str, str], None]


class Watch:
    """One held request's or stream's access: resolved with (code, detail) when a reload revokes it."""

    __slots__ = ("account", "need", "future", "on_revoked")

    def __init__(self, account: Account, need: Need, future: asyncio.Future[tuple[str, str]]) -> None:
        self.account = account
        self.need = need
        self.future = future
        self.on_revoked: OnRevoked | None = None

    def revoke(self, code: str, detail: str) -> None:
        if self.future.done():
            return
        self.future.set_result((code, detail))
        if self.on_revoked is not None:
            self.on_revoked(code, detail)


def allowed(account: Account, need: Need) -> bool:
    """Whether `account` may make a request that needs `need` (the gate's rule)."""
    if need.admin:
        return account.admin
    if need.topic is None and need.group is None:
        return True  # any known account
    return account.may(need.bits, need.topic, need.group)


class Revocations:
    def __init__(self) -> None:
        self._watches: set[Watch] = set()
        self._refresh: Callable[[], object] | None = None  # AclSource.current, with an ACL
        self.revoked_total = 0

    def attach(self, refresh: Callable[[], object]) -> None:
        """With an ACL: `refresh` looks for a changed file (AclSource.current); its reloads call `reloaded`."""
        self._refresh = refresh

    @property
    def watching(self) -> int:
        return len(self._watches)

    def watch(self, scope: Scope) -> Watch | None:
        """A watch of the request's access; None without an ACL (nothing to revoke). Release it when the request ends."""
        account: Account | None = scope.get(ACCOUNT_KEY)
        need: Need | None = scope.get(NEED_KEY)
        if account is None or need is None:
            return None
        watch = Watch(account, need, asyncio.get_running_loop().create_future())
        self._watches.add(watch)
        return watch

    def release(self, watch: Watch | None) -> None:
        if watch is not None:
            self._watches.discard(watch)

    def refresh(self) -> None:
        """Let the ACL reload now if its file changed (cheap: a clock read, at most one stat per interval)."""
        if self._refresh is not None:
            self._refresh()

    def reloaded(self, acl: Acl) -> None:
        """Judge every watch against the new ACL (AclSource's listener, on the loop)."""
        for watch in list(self._watches):
            account = acl.accounts.get(watch.account.digest)
            if account is None:
                verdict = ("UNAUTHENTICATED", f"the token of account {watch.account.name!r} was removed from the ACL")
            elif not allowed(account, watch.need):
                verdict = ("FORBIDDEN", f"account {account.name!r} lost the permission this request needs")
            else:
                continue
            self._watches.discard(watch)
            self.revoked_total += 1
            watch.revoke(*verdict)
