"""Routes: which broker groups hold a topic, and which broker a request for it belongs to.

A topic belongs to every group whose registration records list it (a topic created on a group's
master is mirrored to its slaves). `route_of` is the body of `GET /v1/topics/{topic}/route`;
`owner_group` picks the group a request is served by: this broker's own group when it holds the
topic (or nobody does yet: a new topic is created where it is first written), else the first
group, by name, that holds it.
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
    groups = [group_route(view.groups[name], topic) for name in sorted(view.groups) if topic in view.groups[name].topics()]
    return {"topic": topic, "groups": groups} if groups else None


def owner_group(view: ClusterView, topic: str, own: str) -> str:
    holders = [name for name in sorted(view.groups) if topic in view.groups[name].topics()]
    return own if not holders or own in holders else holders[0]


def master_address(view: ClusterView, group: str) -> str | None:
    leader = view.group(group).leader
    return str(leader.value["http_address"]) if leader is not None else None
