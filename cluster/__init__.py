"""Several broker groups on etcd: registration, routes, forwarding and per-group failover (docs/cluster.md).

Without `--cluster-etcd` nothing here runs. With it, the app builds a `ClusterNode` before the
store loads (`prepare()`), starts it once the store runs and stops it before the store shuts down;
`Forwarder` is the ASGI layer in front of the app (inside the ACL check) and `routing.route_of`
answers `GET /v1/topics/{topic}/route`.
"""

from __future__ import annotations

from cluster.etcd_client import EtcdClient, EtcdError, EtcdUnavailable
from cluster.node import ClusterNode
from cluster.settings import ClusterSettings

__all__ = ["ClusterNode", "ClusterSettings", "EtcdClient", "EtcdError", "EtcdUnavailable"]
