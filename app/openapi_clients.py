"""The spec's last pass: what code generators need to give working clients with default options.

FastAPI and pydantic write a valid spec, but generators read some of it differently from what the
API means (tests/clients generates and runs clients with openapi-typescript + openapi-fetch,
@hey-api/openapi-ts and openapi-python-client to hold these fixes in place):
- An optional property with a `default` is typed required by openapi-typescript (its
  `defaultNonNullable`), so a request without it does not compile and a reply without it is
  typed wrong. Optional properties lose their `default`; a non-null one moves into the description.
- A problem's `code` is one of the codes of `app.problems.PROBLEMS`, declared as the `ProblemCode` enum.
- The headers replies carry are declared: `Retry-After` on every 503 and 429 (see
  `app.problems.problem_response` and `app.access_gate`), `WWW-Authenticate` on 401, and, for any
  path answered with a method it does not serve, the 405 with `Allow` in `components.responses`.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

from app.problems import PROBLEM_MEDIA_TYPE, PROBLEMS


def package_version() -> str:
    """The installed package's version; pyproject.toml's when the source tree is not installed."""
    try:
        return importlib.metadata.version("tidemq")
    except importlib.metadata.PackageNotFoundError:
        with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
            return str(tomllib.load(f)["project"]["version"])


API_VERSION = package_version()

HEADERS: dict[str, dict[str, Any]] = {
    "Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer", "minimum": 0}},
    "WWW-Authenticate": {"description": "Bearer: the request needs a bearer token", "schema": {"type": "string"}},
    "Allow": {"description": "The methods the path serves, comma-separated", "schema": {"type": "string"}},
}
# Status -> the headers every reply of that status carries.
HEADERS_BY_STATUS = {"503": ("Retry-After",), "429": ("Retry-After",), "401": ("WWW-Authenticate",)}


def fit_for_generators(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {})
    for model in components.get("schemas", {}).values():
        _drop_optional_defaults(model)
    _declare_problem_codes(components)
    _declare_headers(schema)


def _drop_optional_defaults(model: dict[str, Any]) -> None:
    required = set(model.get("required", ()))
    for name, prop in model.get("properties", {}).items():
        if name in required or "default" not in prop:
            continue
        default = prop.pop("default")
        if default is not None:
            prop["description"] = f"{prop['description']} (default: {default})" if "description" in prop else f"Default: {default}"


def _declare_problem_codes(components: dict[str, Any]) -> None:
    schemas = components["schemas"]
    schemas["ProblemCode"] = {
        "type": "string",
        "enum": list(PROBLEMS),
        "title": "ProblemCode",
        "description": "The stable code of a problem (docs/http-api.md lists what each means)",
    }
    schemas["Problem"]["properties"]["code"] = {"$ref": "#/components/schemas/ProblemCode"}


def _declare_headers(schema: dict[str, Any]) -> None:
    components = schema["components"]
    components.setdefault("headers", {}).update(HEADERS)
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            for status, response in operation.get("responses", {}).items():
                for name in HEADERS_BY_STATUS.get(status, ()):
                    response.setdefault("headers", {})[name] = {"$ref": f"#/components/headers/{name}"}
    components.setdefault("responses", {})["MethodNotAllowed"] = {
        "description": "METHOD_NOT_ALLOWED: the path does not serve the method (any path may answer it)",
        "headers": {"Allow": {"$ref": "#/components/headers/Allow"}},
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
