"""Routes: which broker groups hold a topic, and which group a request for it belongs to.

A topic belongs to every group whose registration records list it (a topic created on a group's
master is mirrored to its slaves). `route_of` is the body of `GET /v1/topics/{topic}/route`.
`owner_group` picks the group a request that names no group is served by: the first group, by
name, that holds the topic, so that every broker picks the same one (a plain queue id, a queue id
or sharding key in a produce, all mean that group's queues); a topic nobody holds yet belongs to
the group its claim names (cluster/topic_claims.py), None when it has none.
"""

from __future__ import annotations

from typing import Any

from cluster.registry import ClusterView, GroupView


def group_route(group: GroupView, topic: str) -> dict[str, Any]:
    master = group.leader.value.get("http_address") if group.leader is not None else None
    return {
        "broker_name": group.name,
        "epoch": group.current_epoch,
        "master": master,
        "slaves": sorted(str(r["http_address"]) for broker_id, r in group.records.items() if broker_id != group.master_id),
        "queues": int(group.topics()[topic]),
    }


def route_of(view: ClusterView, topic: str) -> dict[str, Any] | None:
    """`{"topic", "groups": [{"broker_name", "epoch", "master", "slaves", "queues"}]}`; None when no group holds it."""
    groups = [group_route(view.groups[name], topic) for name in view.holders(topic)]
    return {"topic": topic, "groups": groups} if groups else None


def owner_group(view: ClusterView, topic: str) -> str | None:
    holders = view.holders(topic)
    return holders[0] if holders else view.claims.get(topic)


def master_address(view: ClusterView, group: str) -> str | None:
    leader = view.group(group).leader
    return str(leader.value["http_address"]) if leader is not None else None


def read_address(view: ClusterView, group: str) -> str | None:
    """A broker that serves reads of the group: its master, else the first member by id; None when it has none."""
    master = master_address(view, group)
    if master is not None:
        return master
    members = sorted(str(r["http_address"]) for r in view.group(group).records.values())
    return members[0] if members else None
