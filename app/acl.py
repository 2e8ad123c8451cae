"""The ACL file: accounts, their token hashes and their topic and group permissions.

The file is TOML (`--acl FILE`, env TIDEMQ_ACL):

    [[accounts]]
    name = "billing"
    token_sha256 = "<64 hex digits: SHA-256 of the token>"
    topics = { "orders" = "SUB", "billing-*" = "PUB|SUB|CREATE" }
    groups = { "billing" = "SUB" }
    rate_limit_per_s = 500      # optional, with burst
    burst = 1000

Invariants:
- An `Acl` is immutable once built: a reload builds a new one and swaps the reference, so a
  request sees one whole file, never half of two.
- Accounts are found by the SHA-256 digest of the presented token (a dict keyed by digest),
  then confirmed with `hmac.compare_digest` on the digests: the broker never compares the
  token itself, and only ever compares fixed-length digests of it.
- A name resolves to the most specific pattern: an exact name beats a `prefix*`, a longer
  prefix beats a shorter one; DENY (no permission) is a pattern's value like any other.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

from app.toml_file import read_toml
from core import ConfigInvalid
from store import GROUP_MAX_BYTES, TOPIC_MAX_BYTES, topic_problem

PUB = 1
SUB = 2
CREATE = 4  # create the topic (PUT /v1/topics/{topic}, or a produce that auto-creates it); updating it stays admin
# Permission words of the file: one or more rights joined by "|", in any order, or DENY, an explicit
# "nothing" that masks a broader pattern.
RIGHTS = {"PUB": PUB, "SUB": SUB, "CREATE": CREATE}
DENY = "DENY"
ACCOUNT_KEYS = {"name", "token_sha256", "admin", "topics", "groups", "rate_limit_per_s", "burst"}
HEX = set("0123456789abcdef")
# Resolved names memoised per account; cleared when full, so a flood of names cannot grow it without bound.
MEMO_LIMIT = 4096


class AclInvalid(ConfigInvalid):
    """Raised when the ACL file cannot be read or does not have the expected shape; the message names the fault."""


@dataclass(frozen=True)
class Patterns:
    """Name patterns -> permission bits: exact names, and prefixes longest first."""

    exact: dict[str, int]
    prefixes: tuple[tuple[str, int], ...]
    memo: dict[str, int] = field(default_factory=dict, compare=False)

    def permission(self, name: str) -> int:
        bits = self.memo.get(name)
        if bits is None:
            bits = self._resolve(name)
            if len(self.memo) >= MEMO_LIMIT:
                self.memo.clear()
            self.memo[name] = bits
        return bits

    def _resolve(self, name: str) -> int:
        if name in self.exact:
            return self.exact[name]
        for prefix, bits in self.prefixes:  # longest first: the first match is the most specific
            if name.startswith(prefix):
                return bits
        return 0


@dataclass(frozen=True)
class Account:
    name: str
    digest: bytes  # SHA-256 of the token
    admin: bool
    topics: Patterns
    groups: Patterns
    rate_limit_per_s: float | None
    burst: int

    def may(self, bits: int, topic: str | None, group: str | None) -> bool:
        """Whether the account holds `bits` on the topic and (when named) on the group."""
        if self.admin:
            return True
        if topic is not None:
            have = self.topics.permission(topic)
            if have & bits != bits or have == 0:  # bits 0 asks for any permission: not DENY, not unlisted
                return False
        return group is None or self.groups.permission(group) & SUB == SUB


@dataclass(frozen=True)
class Acl:
    accounts: dict[bytes, Account]  # keyed by the token's SHA-256 digest

    def authenticate(self, token: bytes) -> Account | None:
        """The account of a presented token, or None."""
        digest = hashlib.sha256(token).digest()
        account = self.accounts.get(digest)
        # The dict finds the candidate by the digest's hash; the final equality is a constant-time
        # comparison of two 32-byte digests, never of the secret token itself.
        if account is not None and hmac.compare_digest(account.digest, digest):
            return account
        return None


def token_hash(token: str) -> str:
    """The hex SHA-256 of a token: what `token_sha256` holds (`tidemq acl hash`)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def permission_bits(word: Any, rights: dict[str, int]) -> int | None:
    """The bits a permission word stands for (`PUB|SUB`, `DENY`, ...); None when it is not one."""
    if word == DENY:
        return 0
    if not isinstance(word, str):
        return None
    parts = word.split("|")
    if len(set(parts)) != len(parts) or not all(p in rights for p in parts):
        return None
    bits = 0
    for part in parts:
        bits |= rights[part]
    return bits


def _patterns(table: Any, where: str, kind: str, rights: dict[str, int]) -> Patterns:
    if not isinstance(table, dict):
        raise AclInvalid(f"{where} must be a table of pattern = permission")
    exact: dict[str, int] = {}
    prefixes: list[tuple[str, int]] = []
    for pattern, word in table.items():
        bits = permission_bits(word, rights)
        if bits is None:
            choices = f"one of {', '.join(rights)} or several joined by |, or {DENY}"
            raise AclInvalid(f"{where}.{pattern!r} must be {choices}, not {word!r}")
        stem = pattern[:-1] if pattern.endswith("*") else pattern
        # A bare "*" (every name) is allowed; otherwise the stem must itself be a valid name.
        problem = topic_problem(stem, GROUP_MAX_BYTES if kind == "group" else TOPIC_MAX_BYTES, kind) if stem else None
        if problem is not None:
            raise AclInvalid(f"{where}: pattern {pattern!r} is invalid: {problem} (a trailing * is allowed)")
        if pattern.endswith("*"):
            prefixes.append((stem, bits))
        else:
            exact[pattern] = bits
    prefixes.sort(key=lambda p: -len(p[0]))
    return Patterns(exact, tuple(prefixes))


def _rate(entry: dict[str, Any], where: str) -> tuple[float | None, int]:
    rate = entry.get("rate_limit_per_s")
    if rate is None:
        if "burst" in entry:
            raise AclInvalid(f"{where}: burst needs rate_limit_per_s")
        return None, 0
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1_000_000:
        raise AclInvalid(f"{where}: rate_limit_per_s must be a number in (0, 1000000], not {rate!r}")
    burst = entry.get("burst", max(1, int(rate)))
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= 10_000_000:
        raise AclInvalid(f"{where}: burst must be an integer in 1..10000000, not {burst!r}")
    return float(rate), burst


def _account(entry: Any, index: int) -> Account:
    where = f"accounts[{index}]"
    if not isinstance(entry, dict):
        raise AclInvalid(f"{where} must be a table")
    unknown = set(entry) - ACCOUNT_KEYS
    if unknown:
        raise AclInvalid(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise AclInvalid(f"{where}: name must be a non-empty string")
    where = f"account {name!r}"
    token = entry.get("token_sha256")
    if not isinstance(token, str) or len(token) != 64 or not set(token.lower()) <= HEX:
        raise AclInvalid(f"{where}: token_sha256 must be 64 hex digits (the SHA-256 of the token; see `tidemq acl hash`)")
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        raise AclInvalid(f"{where}: admin must be true or false")
    rate, burst = _rate(entry, where)
    topics = _patterns(entry.get("topics", {}), f"{where} topics", "topic", RIGHTS)
    groups = _patterns(entry.get("groups", {}), f"{where} groups", "group", {"PUB": PUB, "SUB": SUB})  # only SUB means something there
    return Account(name, bytes.fromhex(token), admin, topics, groups, rate, burst)


def parse_acl(data: dict[str, Any]) -> Acl:
    """An Acl from a parsed TOML document; AclInvalid names the first fault."""
    unknown = set(data) - {"accounts"}
    if unknown:
        raise AclInvalid(f"unknown key(s) {', '.join(sorted(unknown))} (expected [[accounts]])")
    entries = data.get("accounts", [])
    if not isinstance(entries, list):
        raise AclInvalid("accounts must be an array of tables ([[accounts]])")
    accounts: dict[bytes, Account] = {}
    names: set[str] = set()
    for index, entry in enumerate(entries):
        account = _account(entry, index)
        if account.name in names:
            raise AclInvalid(f"account name {account.name!r} appears twice")
        if account.digest in accounts:
            raise AclInvalid(f"accounts {accounts[account.digest].name!r} and {account.name!r} have the same token")
        names.add(account.name)
        accounts[account.digest] = account
    return Acl(accounts)


def load_acl(path: str) -> Acl:
    """Read and check an ACL file; AclInvalid when it cannot be used."""
    data = read_toml(path, "ACL file", AclInvalid)
    try:
        return parse_acl(data)
    except AclInvalid as e:
        raise AclInvalid(f"ACL file {path}: {e}") from None
