"""The spec's bearer security scheme: every operation needs a token when the broker has an ACL,
except the health checks; the refusals it may then answer are declared too."""

from __future__ import annotations

from typing import Any

SCHEME = "bearerAuth"
OPEN_OPERATIONS = {"/healthz", "/readyz"}
REFUSALS = {
    "401": "UNAUTHENTICATED: no bearer token, or an unknown one (when the broker has an ACL)",
    "403": "FORBIDDEN: the token's account lacks the permission (when the broker has an ACL)",
    "429": "RATE_LIMITED: the account is over its rate limit; retry after Retry-After seconds",
}


def add_bearer_security(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "Authorization: Bearer <token>; required when the broker runs with --acl (docs/security.md)",
    }
    schema["security"] = [{SCHEME: []}]
    problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path, item in schema.get("paths", {}).items():
        for operation in item.values():
            if path in OPEN_OPERATIONS:
                operation["security"] = []
                continue
            responses = operation.setdefault("responses", {})
            for status, description in REFUSALS.items():
                responses.setdefault(status, {"description": description, "content": problem})
