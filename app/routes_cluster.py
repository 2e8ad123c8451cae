"""GET /v1/topics/{topic}/route: which broker groups of the cluster hold a topic, their masters and slaves."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from app.broker import BrokerDep
from app.params import TopicPath
from app.problems import ProblemError
from app.responses import JsonResponse, docs
from app.strict_route import StrictRoute
from cluster.routing import route_of


class GroupRoute(BaseModel):
    broker_name: str = Field(description="The broker group (a master and its slaves)")
    epoch: int = Field(description="The group's election epoch")
    master: str | None = Field(description="The master's HTTP base URL; null while the group elects one")
    slaves: list[str] = Field(description="HTTP base URLs of the group's other registered brokers")
    queues: int = Field(description="The topic's queue count in this group")


class TopicRoute(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "topic": "orders",
                "groups": [
                    {"broker_name": "b1", "epoch": 3, "master": "http://10.0.0.1:8080", "slaves": ["http://10.0.0.2:8080"], "queues": 4}
                ],
            }
        }
    )
    topic: str
    groups: list[GroupRoute]


api = APIRouter(tags=["cluster"], route_class=StrictRoute)


@api.get(
    "/v1/topics/{topic}/route",
    operation_id="getTopicRoute",
    summary="The broker groups that hold a topic, each with its master, slaves, epoch and queue count (cluster mode)",
    responses=docs(TopicRoute, 200, "TOPIC_INVALID", "TOPIC_NOT_FOUND", "NOT_FOUND"),
)
async def get_route(broker: BrokerDep, topic: TopicPath) -> Response:
    broker.check_topic_name(topic)
    if broker.cluster is None:
        raise ProblemError("NOT_FOUND", "this broker is not part of a cluster (--cluster-etcd): it is the topic's only broker")
    route = route_of(broker.cluster.view, topic)
    if route is None:
        raise ProblemError("TOPIC_NOT_FOUND", f"no broker group of the cluster holds topic {topic}")
    return JsonResponse(route)
