"""The spec's bearer security scheme: every operation needs a token when the broker has an ACL,
except the health checks; the refusals it may then answer are declared with the route's own."""

from __future__ import annotations

from typing import Any

from app.responses import problem_doc

SCHEME = "bearerAuth"
OPEN_OPERATIONS = {"/healthz", "/readyz"}
REFUSALS = ("UNAUTHENTICATED", "FORBIDDEN", "RATE_LIMITED")


def add_bearer_security(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "Authorization: Bearer <token>; required when the broker runs with --acl (docs/security.md)",
    }
    schema["security"] = [{SCHEME: []}]
    refusals = problem_doc(*REFUSALS)
    for path, item in schema.get("paths", {}).items():
        for operation in item.values():
            if path in OPEN_OPERATIONS:
                operation["security"] = []
                continue
            responses = operation.setdefault("responses", {})
            for status, doc in refusals.items():
                _merge(responses, str(status), doc)


def _merge(responses: dict[str, Any], status: str, doc: dict[str, Any]) -> None:
    """Add the refusal's examples to the route's own problems of that status (403 often has some)."""
    existing = responses.get(status)
    if existing is None:
        responses[status] = {"description": doc["description"], "content": {k: dict(v) for k, v in doc["content"].items()}}
        return
    for media_type, content in doc["content"].items():
        target = existing.setdefault("content", {}).setdefault(media_type, {"schema": content["schema"]})
        target["examples"] = {**target.get("examples", {}), **content["examples"]}
    existing["description"] = ", ".join(dict.fromkeys(existing.get("description", "").split(", ") + doc["description"].split(", ")))
