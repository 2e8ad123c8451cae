"""The checked-in OpenAPI spec: in step with the app, complete, and fit for client generators (tests/clients runs them)."""

from __future__ import annotations

import importlib.metadata
import json
import re
import tomllib
from pathlib import Path

import httpx

from app.openapi_export import spec, spec_bytes
from store import pack_batch

ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = ROOT / "openapi" / "openapi.json"


def test_checked_in_spec_matches_the_app() -> None:
    assert SPEC_PATH.read_bytes() == spec_bytes(), "openapi/openapi.json is stale: run `make openapi` and commit it"


def test_every_operation_is_documented() -> None:
    doc = spec()
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    operation_ids = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            where = f"{method.upper()} {path}"
            operation_ids.append(op["operationId"])
            assert op.get("summary"), where
            responses = op["responses"]
            assert "422" not in responses, where
            problems = [code for code in responses if code[0] in "45"]
            assert problems, where
            for code in problems:
                content = responses[code]["content"]["application/problem+json"]
                assert content["schema"] == {"$ref": "#/components/schemas/Problem"}, where
                assert all(ex["value"]["status"] == int(code) for ex in content["examples"].values()), where
            for code in (c for c in responses if c.startswith("2") and c != "204" and method != "head"):  # HEAD: no body
                for media, content in responses[code]["content"].items():
                    ref = content.get("schema", {}).get("$ref", "")
                    has_example = "example" in content or "examples" in content or "example" in schemas.get(ref.rsplit("/", 1)[-1], {})
                    assert has_example, f"{where} {code} {media} has no example"
    assert len(operation_ids) == len(set(operation_ids))
    assert {"produce", "pull", "putTopic", "commitOffsets", "queryMessages", "getMessage", "offsetByTime", "storeStatus"} <= set(
        operation_ids
    )


def test_every_problem_code_in_the_spec_exists() -> None:
    from app.problems import PROBLEMS

    text = json.dumps(spec())
    for code, kind in PROBLEMS.items():
        if f'"code": "{code}"' in text:
            assert f'"status": {kind.status}' in text


def test_every_reference_resolves() -> None:
    doc = spec()
    refs = set(re.findall(r'"\$ref": "#/components/(\w+)/(\w+)"', json.dumps(doc)))
    assert refs and all(name in doc["components"][kind] for kind, name in refs), refs


def test_info_version_is_the_package_version() -> None:
    with open(ROOT / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert spec()["info"]["version"] == version == importlib.metadata.version("tidemq")


def test_problem_codes_are_an_enum_of_the_problem_table() -> None:
    from app.problems import PROBLEMS

    schemas = spec()["components"]["schemas"]
    assert schemas["ProblemCode"]["enum"] == list(PROBLEMS)
    assert schemas["Problem"]["properties"]["code"] == {"$ref": "#/components/schemas/ProblemCode"}


def test_optional_properties_declare_no_default() -> None:
    """openapi-typescript types a property with a default as required (see app.openapi_clients)."""
    for name, model in spec()["components"]["schemas"].items():
        required = set(model.get("required", ()))
        for prop, schema in model.get("properties", {}).items():
            assert prop in required or "default" not in schema, f"{name}.{prop}"


def test_reply_headers_are_declared() -> None:
    doc = spec()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                headers = response.get("headers", {})
                if status in ("503", "429"):
                    assert headers.get("Retry-After") == {"$ref": "#/components/headers/Retry-After"}, f"{method} {path} {status}"
                if status == "401":
                    assert "WWW-Authenticate" in headers, f"{method} {path}"
    assert "Allow" in doc["components"]["responses"]["MethodNotAllowed"]["headers"]
    batch = doc["paths"]["/v1/topics/{topic}/queues/{queue_id}/messages/batch"]["get"]["responses"]["200"]
    assert set(batch["headers"]) == {
        "X-Tidemq-Status",
        "X-Tidemq-Next-Offset",
        "X-Tidemq-Min-Offset",
        "X-Tidemq-Max-Offset",
        "X-Tidemq-Count",
        "X-Tidemq-Body-Encoding",
    }
    produce = doc["paths"]["/v1/topics/{topic}/messages"]["post"]
    assert any(p["in"] == "header" and p["name"] == "X-Tidemq-Transaction" for p in produce["parameters"])


def test_each_reply_has_one_type_or_a_discriminator() -> None:
    doc = spec()
    pull = doc["paths"]["/v1/topics/{topic}/queues/{queue_id}/messages"]["get"]["responses"]["200"]["content"]
    assert list(pull) == ["application/json"]
    batch = doc["paths"]["/v1/topics/{topic}/queues/{queue_id}/messages/batch"]["get"]["responses"]["200"]["content"]
    assert set(batch) == {"application/x-tidemq-batch", "application/octet-stream"}
    produced = doc["paths"]["/v1/topics/{topic}/messages"]["post"]["responses"]["201"]["content"]["application/json"]["schema"]
    assert produced["discriminator"]["propertyName"] == "kind"
    schemas = doc["components"]["schemas"]
    for kind, ref in produced["discriminator"]["mapping"].items():
        assert schemas[ref.rsplit("/", 1)[-1]]["properties"]["kind"]["const"] == kind
    binary = doc["paths"]["/v1/topics/{topic}/messages/batch"]["post"]
    assert binary["responses"]["201"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/BinaryBatchSendResult"}


def test_the_old_ways_to_the_binary_formats_still_work(client: httpx.Client) -> None:
    """Accept: application/x-tidemq-batch on pull and a batch body on produce, as before their own operations."""
    topic = "old-ways"
    assert client.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code in (200, 201)
    sent = client.post(f"/v1/topics/{topic}/messages", params={"queue_id": 0}, content=pack_batch([(b"a", b"", 0)]),
                       headers={"content-type": "application/x-tidemq-batch"})  # fmt: skip
    assert sent.status_code == 201 and sent.json()["kind"] == "binary_batch"
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}, headers={"accept": "application/x-tidemq-batch"})
    assert pulled.headers["content-type"] == "application/x-tidemq-batch" and pulled.headers["x-tidemq-count"] == "1"
