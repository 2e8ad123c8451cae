"""The spec's bounds from the broker's own settings: what a broker serves at /openapi.json says exactly what
it takes (a pull's `max` up to its max_pull_messages, a long poll's `wait_ms` up to its max_wait_ms, ...).
The checked-in openapi/openapi.json is made with the default settings (app.openapi_export).

Only bounds a setting decides are written here; fixed ones are declared with their models and routes.
"""

from __future__ import annotations

from typing import Any

from app.settings import BrokerSettings

# Which query parameter of which operation is bounded by which setting.
QUERY_MAXIMUMS: dict[tuple[str, str, str], str] = {
    ("/v1/topics/{topic}/queues/{queue_id}/messages", "get", "max"): "max_pull_messages",
    ("/v1/topics/{topic}/queues/{queue_id}/messages", "get", "wait_ms"): "max_wait_ms",
    ("/v1/topics/{topic}/queues/{queue_id}/messages/batch", "get", "max"): "max_pull_messages",
    ("/v1/topics/{topic}/queues/{queue_id}/messages/batch", "get", "wait_ms"): "max_wait_ms",
    ("/v1/groups/{group}/topics/{topic}/receive", "post", "wait_ms"): "max_wait_ms",
    ("/v1/topics/{topic}/messages", "get", "max"): "store.max_msgs_num_batch",
}


def setting_value(settings: BrokerSettings, name: str) -> int:
    owner: Any = settings
    for part in name.split("."):
        owner = getattr(owner, part)
    return int(owner)


def apply_limits(schema: dict[str, Any], settings: BrokerSettings) -> None:
    """Write the settings' bounds into `schema` (in place)."""
    paths = schema.get("paths", {})
    for (path, method, name), setting in QUERY_MAXIMUMS.items():
        for parameter in paths.get(path, {}).get(method, {}).get("parameters", []):
            if parameter["name"] == name and parameter["in"] == "query":
                parameter["schema"]["maximum"] = setting_value(settings, setting)
    components = schema.get("components", {}).get("schemas", {})
    queues = components.get("TopicSpec", {}).get("properties", {}).get("queues")
    if queues is not None:
        for variant in queues.get("anyOf", [queues]):
            if variant.get("type") == "integer":
                variant["minimum"] = 1
                variant["maximum"] = settings.store.max_topic_queue_nums
        queues.pop("minimum", None)  # pydantic writes the field's bound beside the anyOf, where it bounds null too
    messages = components.get("ProduceBatch", {}).get("properties", {}).get("messages")
    if messages is not None:
        messages["maxItems"] = settings.store.max_batch_messages
