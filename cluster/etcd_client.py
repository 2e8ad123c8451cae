"""EtcdClient: the few etcd v3 calls the cluster needs, over etcd's JSON gateway (`/v3/...`) with httpx.

Why the gateway and not a gRPC client: httpx is already a dependency, the gateway is part of every
etcd 3.4+ server (Debian's `etcd-server`), and the calls needed (put, range, delete, one-compare
transactions, lease grant/keepalive/revoke) are single JSON requests; the maintained Python gRPC
clients pull in grpcio and protobuf builds for no gain here. Keys and values are bytes in etcd and
base64 in the gateway's JSON; this module takes and returns `str` keys and JSON-ready values.

Every call has a timeout (`request_timeout_ms`) and tries the endpoints in turn, once each; when
none answers it raises EtcdUnavailable. A gateway error reply raises EtcdError. Thread-safe: one
httpx.Client, which is.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from core import TidemqError


class EtcdError(TidemqError):
    """Raised when etcd answered, but with an error."""


class EtcdUnavailable(EtcdError):
    """Raised when no etcd endpoint answered within the timeout."""


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: Any  # the JSON value stored
    create_revision: int
    mod_revision: int
    lease: int


def _b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: str) -> str:
    """The range end that selects every key starting with `prefix` (etcd's "prefix + 1")."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return raw.decode()


class EtcdClient:
    def __init__(self, endpoints: list[str], request_timeout_ms: int) -> None:
        assert endpoints, "at least one etcd endpoint"
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._http = httpx.Client(timeout=request_timeout_ms / 1000.0)
        self._preferred = 0

    def close(self) -> None:
        self._http.close()

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        errors = []
        for i in range(len(self.endpoints)):
            index = (self._preferred + i) % len(self.endpoints)
            try:
                r = self._http.post(self.endpoints[index] + path, content=orjson.dumps(body))
            except httpx.HTTPError as exc:
                errors.append(f"{self.endpoints[index]}: {type(exc).__name__}")
                continue
            self._preferred = index
            reply: dict[str, Any] = orjson.loads(r.content) if r.content else {}
            if r.status_code != 200 or "error" in reply:
                raise EtcdError(f"etcd {path}: {r.status_code} {reply.get('error') or reply.get('message') or r.text[:200]}")
            return reply
        raise EtcdUnavailable("no etcd endpoint answered (" + "; ".join(errors) + ")")

    # Leases ---------------------------------------------------------------------------

    def grant(self, ttl_s: int) -> int:
        """A new lease of `ttl_s` seconds; its id."""
        return int(self._call("/v3/lease/grant", {"TTL": ttl_s})["ID"])

    def keepalive(self, lease: int) -> int:
        """Renew `lease`; its remaining TTL in seconds, 0 when etcd no longer has it (it expired or was revoked)."""
        reply = self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(reply.get("result", {}).get("TTL", 0))

    def revoke(self, lease: int) -> None:
        """Drop `lease` and every key attached to it (a lease already gone is no error)."""
        try:
            self._call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if "not found" not in str(exc):
                raise

    # Keys -----------------------------------------------------------------------------

    def put(self, key: str, value: Any, lease: int = 0) -> None:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(orjson.dumps(value))}
        if lease:
            body["lease"] = str(lease)
        self._call("/v3/kv/put", body)

    def get(self, key: str) -> KeyValue | None:
        found = self.range(key, None)
        return found[0] if found else None

    def range(self, key: str, range_end: str | None) -> list[KeyValue]:
        """The key (range_end None) or the keys in [key, range_end), in key order."""
        body = {"key": _b64(key)}
        if range_end is not None:
            body["range_end"] = _b64(range_end)
        return [_kv(kv) for kv in self._call("/v3/kv/range", body).get("kvs", [])]

    def prefix(self, prefix: str) -> list[KeyValue]:
        return self.range(prefix, prefix_end(prefix))

    def delete(self, key: str) -> None:
        self._call("/v3/kv/deleterange", {"key": _b64(key)})

    def put_if(self, compares: list[tuple[str, str, int]], puts: list[tuple[str, Any, int]]) -> int:
        """A transaction: when every (key, "create"|"mod", revision) equals, put every (key, value, lease).

        Returns the revision the puts were made at (the new keys' create_revision), 0 when a compare failed.
        ("k", "create", 0) holds while the key does not exist.
        """
        targets = {"create": ("CREATE", "create_revision"), "mod": ("MOD", "mod_revision")}
        compare = [
            {"key": _b64(key), "target": targets[what][0], "result": "EQUAL", targets[what][1]: str(revision)}
            for key, what, revision in compares
        ]
        success = []
        for key, value, lease in puts:
            request: dict[str, Any] = {"key": _b64(key), "value": _b64(orjson.dumps(value))}
            if lease:
                request["lease"] = str(lease)
            success.append({"request_put": request})
        reply = self._call("/v3/kv/txn", {"compare": compare, "success": success})
        return int(reply["header"]["revision"]) if reply.get("succeeded", False) else 0


def _kv(raw: dict[str, Any]) -> KeyValue:
    value = raw.get("value")
    return KeyValue(
        key=_unb64(raw["key"]).decode(),
        value=orjson.loads(_unb64(value)) if value else None,
        create_revision=int(raw.get("create_revision", 0)),
        mod_revision=int(raw.get("mod_revision", 0)),
        lease=int(raw.get("lease", 0)),
    )
