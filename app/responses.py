"""Response classes and the OpenAPI response documentation shared by the route modules.

Every JSON body is written with orjson (`JsonResponse`); handlers return responses
themselves, so FastAPI does not re-validate replies on the hot path. The reply models in
`app.models` are declared per route through `responses=` for the spec only.

`Reply` and `JsonResponse` are complete replies (status, raw headers, body) built without any of
Starlette's per-response work: no header mapping is made, the Content-Length and Content-Type
headers are the two raw pairs. They derive from Starlette's `Response` only so that a FastAPI
route may return them as they are; the hot path (app.hot_routes) writes `status_code`,
`raw_headers` and `body` straight to the server (`is_plain`) without calling them.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from app.problems import PROBLEM_MEDIA_TYPE, PROBLEMS, TYPE_BASE

BATCH_MEDIA_TYPE = "application/x-tidemq-batch"
JSON = b"application/json"


class Reply(Response):
    """A complete reply: `body` with Content-Length, the media type and `headers` (raw latin-1 pairs)."""

    def __init__(
        self, body: bytes | memoryview, status_code: int = 200, media_type: bytes = JSON, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        assert status_code >= 200 and status_code not in (204, 304), "a Reply has a body"
        if isinstance(body, memoryview):
            body = body.cast("B") if body.c_contiguous else body.tobytes()
        self.status_code = status_code
        self.background = None
        self.body = body
        self.raw_headers = [(b"content-length", b"%d" % len(body)), (b"content-type", media_type)]
        if headers:
            self.raw_headers += headers


class JsonResponse(Response):
    """A JSON reply serialised by orjson (`content` may be bytes already serialised, e.g. in a worker thread)."""

    media_type = "application/json"

    def __init__(self, content: Any = None, status_code: int = 200, headers: Any = None, media_type: str | None = None) -> None:
        if headers is not None or media_type is not None:
            super().__init__(content, status_code, headers, media_type)
            return
        self.status_code = status_code
        self.background = None
        body = self.body = content if isinstance(content, bytes) else orjson.dumps(content)
        self.raw_headers = [(b"content-length", b"%d" % len(body)), (b"content-type", JSON)]

    def render(self, content: Any) -> bytes:
        if isinstance(content, bytes):
            return content
        return orjson.dumps(content)


# Response classes whose __call__ is Starlette's plain one (start, then the whole body): the hot path writes them itself.
PLAIN_TYPES = (Response, Reply, JsonResponse)


def is_plain(response: Response) -> bool:
    """True when `response` is a whole body with no background task: sending its start and body is all it does."""
    return type(response) in PLAIN_TYPES and response.background is None


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
