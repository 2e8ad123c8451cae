"""AccessGate: the outermost ASGI app when an ACL is set; tokens, permissions and rate limits
are checked before anything else (the hot routes included) sees the request.

Invariants:
- A refused request is answered by the gate alone (401 UNAUTHENTICATED with
  `WWW-Authenticate: Bearer`, 403 FORBIDDEN, 429 RATE_LIMITED with `Retry-After`), from the
  same problem table as every other error; the app behind never sees it, so nothing is stored.
- The ACL is an immutable snapshot swapped whole by `AclSource` (no thread: the file's mtime and
  size are looked at on a request at most once per `acl_reload_interval_ms`).
- Every request that needs admin leaves one `tidemq.audit` line: method, path, account, status.
- A request let through carries its account and its `Need` in the scope (ACCOUNT_KEY, NEED_KEY):
  held requests and streams register them with app.access_revocation, which a reload re-judges.
- `judge` is the whole decision; the ASGI call and HotRoutes' `answer` (a request the connection
  serves itself: app.direct_requests) both act on it, so both ways in are judged alike.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.access_check import ACCOUNT_KEY, NEED_KEY
from app.access_revocation import allowed
from app.access_rules import Need, need_of
from app.acl import RIGHTS, Account, Acl, AclInvalid, load_acl
from app.problems import ProblemReply
from app.query import query_of

log = logging.getLogger("tidemq.app")
audit = logging.getLogger("tidemq.audit")
UNAUTHENTICATED = {"WWW-Authenticate": "Bearer"}
BEARER = b"bearer "
NEED_MEMO_LIMIT = 8192


class AclSource:
    """The current ACL snapshot, reloaded when the file's (mtime, size) changes."""

    def __init__(self, path: str, interval_ms: int, acl: Acl | None = None) -> None:
        self.path = path
        self.interval_s = interval_ms / 1000
        self.stamp = self._stamp()
        self.acl = acl if acl is not None else load_acl(path)  # a bad file at start refuses the start
        self.next_check = time.monotonic() + self.interval_s
        # Called with each new ACL once it is in force (app.access_revocation re-judges what is held).
        self.listeners: list[Callable[[Acl], None]] = []

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def current(self) -> Acl:
        now = time.monotonic()
        if now >= self.next_check:
            self.next_check = now + self.interval_s
            stamp = self._stamp()
            if stamp != self.stamp:
                self.stamp = stamp  # judged once per change: a bad file is logged once, not every second
                self._reload()
        return self.acl

    def _reload(self) -> None:
        try:
            acl = load_acl(self.path)
        except AclInvalid as e:
            log.error("the new ACL file is refused; the previous one stays in force: %s", e)
            return
        self.acl = acl  # one reference swap: a request sees the old snapshot or the new one
        log.info("ACL reloaded from %s: %d account(s)", self.path, len(acl.accounts))
        for listener in self.listeners:
            listener(acl)


class RateLimiter:
    """A token bucket per account name (kept across reloads), refilled at rate_limit_per_s up to burst."""

    def __init__(self) -> None:
        self.buckets: dict[str, list[float]] = {}  # name -> [tokens, last refill time]

    def retry_after(self, account: Account) -> int:
        """0 when the request may go now (one token taken), else whole seconds until it may."""
        rate = account.rate_limit_per_s
        if rate is None:
            return 0
        now = time.monotonic()
        bucket = self.buckets.get(account.name)
        if bucket is None:
            bucket = self.buckets[account.name] = [float(account.burst), now]
        tokens = min(float(account.burst), bucket[0] + (now - bucket[1]) * rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return 0
        bucket[0] = tokens
        return max(1, math.ceil((1.0 - tokens) / rate))

    def give_back(self, account: Account) -> None:
        """Return the token `retry_after` took for a request that was then not served (another way judges it again)."""
        bucket = self.buckets.get(account.name)
        if account.rate_limit_per_s is not None and bucket is not None:
            bucket[0] = min(float(account.burst), bucket[0] + 1.0)


def bearer_token(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return bearer_of(value)
    return None


def bearer_of(authorization: bytes) -> bytes | None:
    """The token of an Authorization header's value `Bearer <token>` (the scheme in any case), else None."""
    if authorization[:7].lower() == BEARER and len(authorization) > 7:
        return bytes(authorization[7:].strip())
    return None


class AccessGate:
    def __init__(self, app: ASGIApp, source: AclSource, metrics_public: bool, problem: ProblemReply) -> None:
        self.app = app
        self.source = source
        self.metrics_public = metrics_public
        self.problem = problem
        self.limiter = RateLimiter()
        # (method, path, query) -> Need: a producer or consumer repeats the same few requests.
        self.needs: dict[tuple[str, str, bytes], Need] = {}
        self.produce_needs: dict[str, Need] = {}  # topic -> a produce's Need (`admit_produce`)

    def need(self, scope: Scope) -> Need:
        key = (scope["method"], scope["path"], scope["query_string"])
        need = self.needs.get(key)
        if need is None:
            need = need_of(scope["method"], scope["path"], query_of(scope))
            if len(self.needs) >= NEED_MEMO_LIMIT:
                self.needs.clear()  # bounded: a scan of random paths cannot grow it
            self.needs[key] = need
        return need

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        verdict = self.judge(scope)
        if isinstance(verdict, Response):
            await verdict(scope, receive, send)
        elif verdict is None:
            await self.app(scope, receive, send)
        else:
            await self._audited(scope, receive, send, verdict)

    def judge(self, scope: Scope) -> Response | Account | None:
        """The gate's verdict on an HTTP request (its query parsed already): the refusal to answer (audited when the
        route is), the account when the request is let through and its answer is to be audited (`audit`), or None
        when it is let through unaudited; a request let through carries its account and need in the scope."""
        need = self.need(scope)
        if need.open or (need.metrics and self.metrics_public):
            return None
        token = bearer_token(scope)
        account = self.source.current().authenticate(token) if token is not None else None
        if account is None:
            detail = "a bearer token is required" if token is None else "the bearer token is not known"
            return self._refusal(scope, "UNAUTHENTICATED", detail, UNAUTHENTICATED)
        if not allowed(account, need):
            return self._refusal(scope, "FORBIDDEN", _forbidden_detail(account, need, scope), None, account)
        wait_s = self.limiter.retry_after(account)
        if wait_s:
            detail = f"account {account.name!r} is over its rate limit ({account.rate_limit_per_s}/s, burst {account.burst})"
            return self._refusal(scope, "RATE_LIMITED", detail, {"Retry-After": str(wait_s)}, account)
        scope[ACCOUNT_KEY] = account
        scope[NEED_KEY] = need
        return account if need.admin or need.audited else None

    def admit_produce(self, topic: str, authorization: bytes | None) -> Account | None:
        """The account a produce to `topic` goes as when `judge` would let it through unaudited, its rate limit's
        token taken (the produce lane, which has no scope); None when `judge` would refuse or audit it: the caller
        leaves the request to the way that calls `judge`, which answers it. A caller that admits a produce and then
        leaves it to that way after all gives its token back (`limiter.give_back`): `judge` takes one again."""
        need = self.produce_needs.get(topic)
        if need is None:
            need = need_of("POST", f"/v1/topics/{topic}/messages", {})
            if len(self.produce_needs) >= NEED_MEMO_LIMIT:
                self.produce_needs.clear()  # bounded, as `needs`
            self.produce_needs[topic] = need
        token = bearer_of(authorization) if authorization is not None else None
        if token is None or need.open or need.admin or need.audited:
            return None
        account = self.source.current().authenticate(token)
        if account is None or not allowed(account, need) or self.limiter.retry_after(account):
            return None
        return account

    def _refusal(self, scope: Scope, code: str, detail: str, headers: dict[str, str] | None, account: Account | None = None) -> Response:
        """A refusal's reply; an admin route's refusal is audited with the account that tried (`-`: no or an unknown token)."""
        response = self.problem(code, detail, scope["path"][:200], headers)
        if need_audit(scope):
            audit_answer(scope, account.name if account is not None else "-", response.status_code)
        return response

    async def _audited(self, scope: Scope, receive: Receive, send: Send, account: Account) -> None:
        status = [0]

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            audit_answer(scope, account.name, status[0])


def audit_answer(scope: Scope, who: str, status: int) -> None:
    """The `tidemq.audit` line of an audited request's answer: method, path, account, status."""
    audit.info("%s %s account=%s status=%d", scope["method"], scope["path"][:200], who, status)


def need_audit(scope: Scope) -> bool:
    """Refusals of admin actions are audited too (who tried is as telling as who did)."""
    need = need_of(scope["method"], scope["path"], query_of(scope))
    return need.admin or need.audited


def _forbidden_detail(account: Account, need: Need, scope: Scope) -> str:
    if need.admin:
        return f"account {account.name!r} is not an administrator; {scope['method']} {scope['path'][:200]} needs one"
    words = "|".join(name for name, bit in RIGHTS.items() if need.bits & bit) or "any permission"
    on = " and ".join(part for part in (need.topic and f"topic {need.topic[:200]!r}", need.group and f"group {need.group[:200]!r}") if part)
    return f"account {account.name!r} lacks {words} on {on}"
