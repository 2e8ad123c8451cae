"""The checked-in OpenAPI spec: in step with the app, complete, and usable by a generated client."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.openapi_export import spec, spec_bytes

ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = ROOT / "openapi" / "openapi.json"
VENV_BIN = Path(sys.executable).parent


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
            for code in (c for c in responses if c.startswith("2") and c != "204"):
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


@pytest.mark.timeout(180)
def test_generated_client_sends_and_long_polls(shared_broker, tmp_path: Path) -> None:
    out = tmp_path / "client"
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(VENV_BIN / "openapi-python-client"), "generate", "--path", str(SPEC_PATH), "--output-path", str(out)]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(out))
    try:
        client_module = importlib.import_module("tidemq_client")
        put_topic = importlib.import_module("tidemq_client.api.topics.put_topic")
        produce = importlib.import_module("tidemq_client.api.produce.produce")
        pull = importlib.import_module("tidemq_client.api.consume.pull")
        models = importlib.import_module("tidemq_client.models")

        client = client_module.Client(base_url=shared_broker.url, timeout=httpx.Timeout(15.0))
        created = put_topic.sync("sdk-topic", client=client, body=models.TopicSpec(queues=2))
        assert isinstance(created, models.TopicInfo) and created.read_queues == 2

        sent = produce.sync("sdk-topic", client=client, body=models.ProduceMessage(body="from the sdk", tags="TagA", queue_id=1))
        assert isinstance(sent, models.SendResult) and sent.queue_id == 1

        bad = produce.sync("bad.topic", client=client, body=models.ProduceMessage(body="x"))
        assert isinstance(bad, models.Problem) and bad.code == "TOPIC_INVALID"

        first = pull.sync("sdk-topic", 1, client=client, offset=0, wait_ms=3000)
        assert isinstance(first, models.PullResult) and first.status == "FOUND"
        assert first.messages[0].body == "from the sdk" and first.messages[0].tags == "TagA"

        # A long poll held by the generated client returns when a message is sent.
        def send_later() -> None:
            time.sleep(0.3)
            produce.sync("sdk-topic", client=client, body=models.ProduceMessage(body="second", queue_id=1))

        sender = threading.Thread(target=send_later)
        sender.start()
        started = time.monotonic()
        held = pull.sync("sdk-topic", 1, client=client, offset=first.next_offset, wait_ms=5000)
        sender.join()
        assert isinstance(held, models.PullResult) and held.status == "FOUND"
        assert [m.body for m in held.messages] == ["second"]
        assert time.monotonic() - started < 4.5
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == "tidemq_client" or m.startswith("tidemq_client.")]:
            del sys.modules[name]
