"""The BORNHOST of a produced message: the address and port of the HTTP client that sent it.

RocketMQ's producer puts its own socket address there (MessageExtBrokerInner.bornHost) and the
broker writes 8 bytes for an IPv4 address or, with SYSFLAG's BORNHOST_V6_FLAG, 20 for an IPv6
one (CommitLog.asyncPutMessage sets the flag from the address). The ASGI server reports the
peer as `scope["client"]`; an IPv6 peer, IPv4-mapped ones (::ffff:a.b.c.d) included, is an
IPv6 host here, as the socket reports it. The store sets the v6 flag from the length of what
this returns, so the host is worked out once per request and the put does nothing per message.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from store import DEFAULT_BORN_HOST

_PACKED: dict[str, bytes] = {}  # client address text -> its packed address; clients repeat
_MAX_PACKED = 4_096


def born_host_of(scope: Mapping[str, Any]) -> bytes:
    """8 bytes (IPv4 + port) or 20 (IPv6 + port) for the request's client; loopback port 0 when
    the server names none or not by an IP address (a Unix socket)."""
    return born_host_of_client(scope.get("client"))


def born_host_of_client(client: Any) -> bytes:
    """`born_host_of` for a client as an ASGI scope names it: (host, port), or None."""
    if not client:
        return DEFAULT_BORN_HOST
    host, port = client[0], client[1]
    packed = _PACKED.get(host)
    if packed is None:
        try:
            packed = ipaddress.ip_address(host.partition("%")[0]).packed  # without an IPv6 zone id
        except ValueError:
            return DEFAULT_BORN_HOST
        if len(_PACKED) < _MAX_PACKED:
            _PACKED[host] = packed
    if not isinstance(port, int) or not 0 <= port <= 0xFFFF:
        port = 0
    return packed + port.to_bytes(4, "big")
