"""Transactions: resolve one (`POST /v1/transactions/{id}`), producer groups and their check URL,
and the transactions a producer group left unresolved.

Invariants:
- A resolution runs in the read pool (it waits for its puts' durability like a produce); a
  commit is visible once, exactly once, even when repeated or raced by the broker's check-back.
- The same resolution twice answers 200 with `changed: false`; the other one answers 409
  TRANSACTION_RESOLVED naming the state; an id that names no half message answers 404.
- A check URL is an absolute http or https URL of at most 2,048 characters (CHECK_URL_INVALID),
  persisted before the answer.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query
from starlette.responses import Response

from app.broker import BrokerDep
from app.params import PRODUCER_GROUP_SCHEMA
from app.problems import ProblemError, put_problem
from app.responses import JsonResponse, docs, docs_create_or_update
from app.strict_route import StrictRoute
from app.transaction_models import (
    PendingTransactions,
    ProducerGroupInfo,
    ProducerGroupSettings,
    TransactionResolve,
    TransactionResolved,
)
from store import MessageStore, ResolveStatus, StoreNotRunning, TransactionAction, check_url_problem, producer_group_problem

ProducerGroupPath = Annotated[str, Path(description="Producer group name", json_schema_extra=PRODUCER_GROUP_SCHEMA)]
TransactionIdPath = Annotated[
    str,
    Path(description="Transaction id: the half message's offset message id (32 hex characters)", json_schema_extra={"maxLength": 64}),
]
StateQuery = Annotated[
    str,
    Query(
        description="unknown: unresolved past transaction_timeout_ms (what a producer must check); pending: every unresolved one",
        json_schema_extra={"enum": ["unknown", "pending"]},
    ),
]


def check_producer_group(name: str) -> None:
    problem = producer_group_problem(name)
    if problem is not None:
        raise ProblemError("PRODUCER_GROUP_INVALID", f"{problem}: {name[:200]!r}")


api = APIRouter(tags=["transactions"], route_class=StrictRoute)


@api.post(
    "/v1/transactions/{transaction_id}",
    operation_id="resolveTransaction",
    summary="Commit (deliver once) or roll back (discard) a transactional message",
    responses=docs(
        TransactionResolved,
        200,
        "TRANSACTION_NOT_FOUND",
        "TRANSACTION_RESOLVED",
        "BODY_INVALID",
        "NOT_MASTER",
        "SHUTTING_DOWN",
        "DISK_FULL",
        "DISPATCH_BEHIND",
        "STORE_WRITE_FAILED",
        "FLUSH_DISK_TIMEOUT",
        "FLUSH_SLAVE_TIMEOUT",
        "SLAVE_NOT_AVAILABLE",
    ),  # fmt: skip
)
async def resolve(broker: BrokerDep, transaction_id: TransactionIdPath, body: Annotated[TransactionResolve, Body()]) -> Response:
    store = broker.store
    action = TransactionAction(body.action)
    try:
        outcome = await broker.run(store.transactions.resolve, transaction_id, action)
    except StoreNotRunning as exc:
        raise ProblemError("SHUTTING_DOWN", str(exc)) from exc
    if outcome.status is ResolveStatus.NOT_FOUND:
        raise ProblemError("TRANSACTION_NOT_FOUND", f"no transaction {transaction_id[:64]!r}: no half message has this id")
    if outcome.status is ResolveStatus.CONFLICT:
        detail = (
            f"the transaction is already {outcome.state.value}; it cannot be {'committed' if action.value == 'commit' else 'rolled back'}"
        )
        raise ProblemError("TRANSACTION_RESOLVED", detail, {"state": outcome.state.value})
    if outcome.status is ResolveStatus.PUT_FAILED:
        assert outcome.put_result is not None
        raise put_problem(outcome.put_result)
    changed = outcome.status is ResolveStatus.RESOLVED
    return JsonResponse({"transaction_id": transaction_id, "state": outcome.state.value, "changed": changed})


def group_info(store: MessageStore, name: str) -> dict[str, Any]:
    group = store.transactions.producer_group(name)
    pending = len(store.transactions.unresolved(name, 0))
    return {"producer_group": name, "check_url": group.check_url if group is not None else None, "pending": pending}


@api.put(
    "/v1/producer-groups/{producer_group}",
    operation_id="putProducerGroup",
    summary="Create or update a producer group: the URL the broker checks its unresolved transactions with",
    responses=docs_create_or_update(ProducerGroupInfo, "PRODUCER_GROUP_INVALID", "CHECK_URL_INVALID", "BODY_INVALID", "STORE_WRITE_FAILED"),
)
async def put_group(broker: BrokerDep, producer_group: ProducerGroupPath, body: Annotated[ProducerGroupSettings, Body()]) -> Response:
    store = broker.store
    check_producer_group(producer_group)
    if body.check_url is not None:
        problem = check_url_problem(body.check_url)
        if problem is not None:
            raise ProblemError("CHECK_URL_INVALID", f"check_url {problem}")
    try:
        created = await broker.run(store.transactions.put_producer_group, producer_group, body.check_url)
    except OSError as exc:
        raise ProblemError("STORE_WRITE_FAILED", f"the producer group could not be recorded: {exc}") from exc
    return JsonResponse(group_info(broker.store, producer_group), 201 if created else 200)


@api.get(
    "/v1/producer-groups/{producer_group}",
    operation_id="getProducerGroup",
    summary="A producer group's check URL and its unresolved transactions count",
    responses=docs(ProducerGroupInfo, 200, "PRODUCER_GROUP_INVALID", "PRODUCER_GROUP_NOT_FOUND"),
)
async def get_group(broker: BrokerDep, producer_group: ProducerGroupPath) -> Response:
    store = broker.store
    check_producer_group(producer_group)
    info = group_info(broker.store, producer_group)
    if store.transactions.producer_group(producer_group) is None and not info["pending"]:
        raise ProblemError("PRODUCER_GROUP_NOT_FOUND", f"no producer group {producer_group}: never configured, nothing pending")
    return JsonResponse(info)


@api.get(
    "/v1/producer-groups/{producer_group}/transactions",
    operation_id="listTransactions",
    summary="The producer group's unresolved transactions, oldest first, for the producer to resolve",
    responses=docs(PendingTransactions, 200, "PRODUCER_GROUP_INVALID"),
)
async def list_transactions(broker: BrokerDep, producer_group: ProducerGroupPath, state: StateQuery = "unknown") -> Response:
    store = broker.store
    check_producer_group(producer_group)
    if state not in ("unknown", "pending"):
        raise ProblemError("REQUEST_INVALID", f"state must be unknown or pending, not {state[:40]!r}")
    txn = store.transactions
    halves = txn.unresolved(producer_group, txn.timeout_ms if state == "unknown" else 0)
    now = store.now_ms()
    return JsonResponse({"producer_group": producer_group, "state": state, "transactions": [h.to_dict(now) for h in halves]})
