"""Checks a route makes itself when the resource's topic is known only inside it (the gate has
already authenticated the request and put its account in the scope)."""

from __future__ import annotations

from starlette.requests import Request

from app.acl import CREATE, Account
from app.problems import ProblemError

ACCOUNT_KEY = "tidemq.account"
# The scope key of what the gate judged the request to need (app.access_rules.Need).
NEED_KEY = "tidemq.need"


def request_account(request: Request) -> Account | None:
    """The request's account; None when the broker runs without an ACL."""
    account: Account | None = request.scope.get(ACCOUNT_KEY)
    return account


def require(request: Request, bits: int, topic: str, what: str) -> None:
    """ProblemError FORBIDDEN unless the request's account holds `bits` on `topic` (no ACL: allowed)."""
    account = request_account(request)
    if account is not None and not account.may(bits, topic, None):
        raise ProblemError("FORBIDDEN", f"account {account.name!r} may not {what} topic {topic[:200]!r}")


def require_create(request: Request, topic: str, how: str) -> None:
    """ProblemError FORBIDDEN unless the request's account may create `topic` (CREATE on it, or admin; no ACL: allowed).
    `how` says what would create it, for the detail."""
    account = request_account(request)
    if account is not None and not account.may(CREATE, topic, None):
        raise ProblemError(
            "FORBIDDEN",
            f"account {account.name!r} may not create topic {topic[:200]!r}: {how} creates it, which needs CREATE on it "
            "in the account's topic rules (or admin)",
        )


def require_admin(request: Request, what: str) -> None:
    """ProblemError FORBIDDEN unless the request's account is an administrator (no ACL: allowed)."""
    account = request_account(request)
    if account is not None and not account.admin:
        raise ProblemError("FORBIDDEN", f"account {account.name!r} is not an administrator; {what} needs one")
