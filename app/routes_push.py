"""Push subscriptions: /v1/groups/{group}/push (PUT, GET, DELETE) and /v1/push (every subscription).

Invariants: a subscription is stored only when its URL is an absolute http(s) URL whose host is in
`push_allowed_hosts` (else 400 PUSH_TARGET_FORBIDDEN or PUSH_URL_INVALID, nothing stored), its
topic exists, its limits are within the broker's `push_max_*` settings and the broker holds fewer
than `push_max_subscriptions` others; with an ACL, SUB on the topic too (the gate checked SUB on
the group). The secret is never shown. A 2xx is a change recorded in the state log (replicated
and recovered like a group's settings); the push service (app/push_service.py) follows it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from starlette.responses import Response

from app.access_check import require
from app.acl import SUB
from app.broker import Broker, BrokerDep
from app.params import GroupPath
from app.problems import ProblemError
from app.push_models import DEFAULT_MAX_IN_FLIGHT, DEFAULT_TIMEOUT_MS, PushSubscriptionInfo, PushSubscriptionList, PushSubscriptionSpec
from app.push_service import PushCounts
from app.push_targets import host_allowed, target_host, url_problem
from app.responses import JsonResponse, docs, docs_create_or_update
from app.routes_groups import check_consumption, check_group, group_lag
from app.strict_route import StrictRoute
from store import PushSubscription, dlq_topic

api = APIRouter(tags=["push subscriptions"], route_class=StrictRoute)


def subscription_json(broker: Broker, sub: PushSubscription, counts: PushCounts | None) -> dict[str, Any]:
    c = counts or PushCounts()
    return {
        "group": sub.group, "topic": sub.topic, "url": sub.url, "max_in_flight": sub.max_in_flight, "timeout_ms": sub.timeout_ms,
        "created_ms": sub.created_ms, "state": "delivering" if broker.may_deliver() else "standby",
        "lag": group_lag(broker.store, sub.group, sub.topic), "dead_letter_topic": dlq_topic(sub.group),
        "counts": {"delivered": c.delivered, "failed": c.failed, "errors": c.errors, "too_large": c.too_large, "in_flight": c.in_flight,
                   "last_status": c.last_status, "last_error": c.last_error, "last_attempt_ms": c.last_attempt_ms},
    }  # fmt: skip


def check_spec(broker: Broker, spec: PushSubscriptionSpec) -> tuple[int, int]:
    """The subscription's URL, host and limits against the broker's settings (400s; nothing stored);
    its max_in_flight and timeout_ms, the defaults filled in."""
    settings = broker.settings
    problem = url_problem(spec.url)
    if problem is not None:
        raise ProblemError("PUSH_URL_INVALID", problem)
    host = target_host(spec.url)
    if not host_allowed(host, settings.push_allowed_hosts):
        listed = (
            "no host is allowed (push_allowed_hosts is empty)" if not settings.push_allowed_hosts else "it is not in push_allowed_hosts"
        )
        raise ProblemError("PUSH_TARGET_FORBIDDEN", f"the broker does not push to {host[:200]!r}: {listed}")
    in_flight = spec.max_in_flight if spec.max_in_flight is not None else min(DEFAULT_MAX_IN_FLIGHT, settings.push_max_in_flight)
    timeout_ms = spec.timeout_ms if spec.timeout_ms is not None else min(DEFAULT_TIMEOUT_MS, settings.push_max_timeout_ms)
    if in_flight > settings.push_max_in_flight:
        raise ProblemError("BODY_INVALID", f"max_in_flight is at most {settings.push_max_in_flight} on this broker")
    if timeout_ms > settings.push_max_timeout_ms:
        raise ProblemError("BODY_INVALID", f"timeout_ms is at most {settings.push_max_timeout_ms} on this broker")
    return in_flight, timeout_ms


@api.put(
    "/v1/groups/{group}/push",
    operation_id="putPushSubscription",
    summary="Create or replace the group's push subscription: the broker POSTs each message of the topic to the URL",
    responses=docs_create_or_update(
        PushSubscriptionInfo,
        "GROUP_INVALID",
        "BODY_INVALID",
        "TOPIC_INVALID",
        "TOPIC_NOT_FOUND",
        "PUSH_URL_INVALID",
        "PUSH_TARGET_FORBIDDEN",
        "PUSH_LIMIT_REACHED",
        "FORBIDDEN",
        "NOT_MASTER",
        "STORE_WRITE_FAILED",
    ),  # fmt: skip
)
async def put_push(broker: BrokerDep, request: Request, group: GroupPath, body: Annotated[PushSubscriptionSpec, Body()]) -> Response:
    check_group(group)
    check_consumption(group, body.topic)
    require(request, SUB, body.topic, "push the messages of")  # before the topic's lookup: a refusal says nothing of the topic
    broker.check_master()
    broker.topic_config(body.topic)
    in_flight, timeout_ms = check_spec(broker, body)
    gc = broker.store.group_consumption
    current = gc.push_subscription(group)
    if current is None and len(gc.push_subscriptions()) >= broker.settings.push_max_subscriptions:
        raise ProblemError("PUSH_LIMIT_REACHED", f"the broker holds {broker.settings.push_max_subscriptions} push subscriptions, its limit")
    created_ms = current.created_ms if current is not None else broker.store.now_ms()
    sub = PushSubscription(group, body.topic, body.url, in_flight, timeout_ms, body.secret, created_ms)
    created = await broker.run(gc.put_push_subscription, sub)
    broker.push.wakeup()
    return JsonResponse(subscription_json(broker, sub, broker.push.counts().get(group)), 201 if created else 200)


def _subscription(broker: Broker, request: Request, group: str) -> PushSubscription:
    check_group(group)
    sub = broker.store.group_consumption.push_subscription(group)
    if sub is None:
        raise ProblemError("NOT_FOUND", f"group {group} has no push subscription")
    require(request, SUB, sub.topic, "see the push subscription of")
    return sub


@api.get(
    "/v1/groups/{group}/push",
    operation_id="getPushSubscription",
    summary="The group's push subscription: its target, state, lag and delivery counts (never its secret)",
    responses=docs(PushSubscriptionInfo, 200, "GROUP_INVALID", "NOT_FOUND", "FORBIDDEN"),
)
async def get_push(broker: BrokerDep, request: Request, group: GroupPath) -> Response:
    sub = _subscription(broker, request, group)
    return JsonResponse(subscription_json(broker, sub, broker.push.counts().get(group)))


@api.delete(
    "/v1/groups/{group}/push",
    operation_id="deletePushSubscription",
    summary="Stop the group's push subscription (deliveries under way end; the group's offsets stay)",
    status_code=204,
    responses={
        **docs(None, 204, "GROUP_INVALID", "NOT_FOUND", "FORBIDDEN", "NOT_MASTER", "STORE_WRITE_FAILED"),
        204: {"description": "Deleted"},
    },
)
async def delete_push(broker: BrokerDep, request: Request, group: GroupPath) -> Response:
    _subscription(broker, request, group)
    broker.check_master()
    await broker.run(broker.store.group_consumption.delete_push_subscription, group)
    broker.push.wakeup()
    return Response(status_code=204)


@api.get(
    "/v1/push",
    operation_id="listPushSubscriptions",
    summary="Every push subscription with its state and delivery counts",
    responses=docs(PushSubscriptionList),
)
async def list_push(broker: BrokerDep) -> Response:
    counts = broker.push.counts()
    subs = broker.store.group_consumption.push_subscriptions()
    return JsonResponse({"subscriptions": [subscription_json(broker, s, counts.get(s.group)) for s in subs]})
