"""Response classes and the OpenAPI response documentation shared by the route modules.

Every JSON body is written with orjson (`JsonResponse`); handlers return responses
themselves, so FastAPI does not re-validate replies on the hot path. The reply models in
`app.models` are declared per route through `responses=` for the spec only.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from app.problems import PROBLEM_MEDIA_TYPE, PROBLEMS, TYPE_BASE

BATCH_MEDIA_TYPE = "application/x-tidemq-batch"


class JsonResponse(Response):
    """A JSON reply serialised by orjson."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        if isinstance(content, bytes):  # already serialised (e.g. in a worker thread)
            return content
        return orjson.dumps(content)


def problem_doc(*codes: str) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entries for the problems a route may answer, one example per code."""
    by_status: dict[int, list[str]] = {}
    for code in codes:
        by_status.setdefault(PROBLEMS[code].status, []).append(code)
    out: dict[int | str, dict[str, Any]] = {}
    for status, status_codes in sorted(by_status.items()):
        examples = {
            code: {
                "summary": PROBLEMS[code].title,
                "value": {
                    "type": TYPE_BASE + code.lower().replace("_", "-"),
                    "title": PROBLEMS[code].title,
                    "status": status,
                    "detail": PROBLEMS[code].title,
                    "code": code,
                },
            }
            for code in status_codes
        }
        out[status] = {
            "description": ", ".join(status_codes),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}, "examples": examples}},
        }
    return out


# Problems any route may answer: bad parameters, an unavailable or busy store, an unexpected error.
COMMON_PROBLEMS = ("REQUEST_INVALID", "SERVICE_NOT_AVAILABLE", "READS_BUSY", "INTERNAL_ERROR")


def docs(model: type | None, status: int = 200, *codes: str, example: Any = None) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: its success model and its problems (plus the common ones)."""
    out = problem_doc(*dict.fromkeys(codes + COMMON_PROBLEMS))
    ok: dict[str, Any] = {"description": "OK" if status == 200 else "Created"}
    if model is not None:
        ok["model"] = model
    if example is not None:
        ok["content"] = {"application/json": {"example": example}}
    out[status] = ok
    return out


def docs_create_or_update(model: type, *codes: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a PUT that creates (201) or updates (200) what it names, both answered with `model`."""
    return {**docs(model, 200, *codes), 201: {"description": "Created", "model": model}}
