"""Where a push subscription may deliver: an absolute http or https URL whose host an operator allowed.

`push_allowed_hosts` lists host names and IP literals (matched exactly, without case) and
`*.example.com` patterns (any subdomain of example.com, not example.com itself); an empty list allows
no target, so a broker pushes only where its operator said it may. The check is by name: a listed
name is trusted to resolve where the operator meant (list IP addresses to pin targets). Ports are
not restricted. A URL with user information or a fragment is refused: credentials in a URL end up
in logs, and a fragment is never sent.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

# Longest push URL, in bytes (the store holds at most 2,048).
MAX_PUSH_URL_BYTES = 2_048
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def allowed_host_entry(entry: str) -> bool:
    """Whether `entry` can be a push_allowed_hosts item: a host name, an IP literal or `*.` and a host name."""
    name = entry.lower().removeprefix("*.")
    return _is_ip(name) if not entry.startswith("*.") and _is_ip(name) else _is_host_name(name)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_host_name(text: str) -> bool:
    labels = text.split(".")
    return 0 < len(text) <= 253 and all(_HOST_LABEL.match(label) for label in labels)


def host_allowed(host: str, allowed: list[str]) -> bool:
    """Whether `host` (a URL's host, without brackets) matches an entry of `allowed`."""
    host = host.lower().rstrip(".")
    for entry in allowed:
        entry = entry.lower()
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
        elif _same_host(host, entry):
            return True
    return False


def _same_host(host: str, entry: str) -> bool:
    if host == entry:
        return True
    try:
        return ipaddress.ip_address(host) == ipaddress.ip_address(entry)  # "::1" and "0:0::1" alike
    except ValueError:
        return False


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a push target's URL (shape only); None when it can."""
    if len(url.encode()) > MAX_PUSH_URL_BYTES:
        return f"the url is longer than {MAX_PUSH_URL_BYTES} bytes"
    if not url.isascii() or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        return "the url holds spaces, control characters or non-ASCII characters (percent-encode them; IDNA for names)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port out of range
    except ValueError as e:
        return f"the url cannot be parsed: {e}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "the url must be an absolute http:// or https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "the url must not carry user information (credentials in URLs end up in logs)"
    if parts.fragment or url.endswith("#"):
        return "the url must not have a fragment"
    return None


def target_host(url: str) -> str:
    """The host of a URL `url_problem` accepted."""
    host = urlsplit(url).hostname
    assert host is not None
    return host


def origin_of(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL `url_problem` accepted: the unit connections are pooled and bounded by."""
    parts: SplitResult = urlsplit(url)
    port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    return parts.scheme, target_host(url), port
