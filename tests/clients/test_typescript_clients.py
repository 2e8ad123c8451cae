"""TypeScript clients generated from openapi/openapi.json with default options compile under
`tsc` with strict on, and run README's walk-through against a live broker.

Generators: openapi-typescript + openapi-fetch, and @hey-api/openapi-ts (versions pinned in
tests/clients/node/package-lock.json). Each walk-through (tests/clients/ts) checks every step
itself, exits non-zero on a failed check and prints a summary that is checked here too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.app.conftest import BrokerProcess
from tests.clients.conftest import NODE_DIR

ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = ROOT / "openapi" / "openapi.json"
WALKTHROUGHS = Path(__file__).resolve().parent / "ts"
TSCONFIG = {
    "compilerOptions": {
        "strict": True,
        "target": "ES2022",
        # CommonJS output that node runs as it is; generated code imports its own modules without extensions.
        "module": "node16",
        "moduleResolution": "node16",
        "lib": ["ES2022", "DOM", "DOM.Iterable"],
        "types": ["node"],
        "outDir": "out",
        # One tsc run both checks and compiles: a type error fails it and writes nothing.
        "noEmitOnError": True,
    }
}
# generator -> (command making the client in the project directory, the walk-through program)
GENERATORS = {
    "openapi-fetch": (["openapi-typescript", str(SPEC_PATH), "-o", "schema.d.ts"], "openapi_fetch_walkthrough"),
    "hey-api": (["openapi-ts", "-i", str(SPEC_PATH), "-o", "hey"], "hey_api_walkthrough"),
}
STEP_TIMEOUT_S = 120


def run(cmd: list[str], cwd: Path, bin_dir: Path) -> str:
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_generated_typescript_client_runs_the_walkthrough(
    generator: str, node_tools: Path, clients_broker: BrokerProcess, tmp_path: Path
) -> None:
    generate, program = GENERATORS[generator]
    project = tmp_path / generator
    project.mkdir()
    (project / "node_modules").symlink_to(NODE_DIR / "node_modules")
    shutil.copy(WALKTHROUGHS / f"{program}.ts", project)
    (project / "tsconfig.json").write_text(json.dumps({**TSCONFIG, "files": [f"{program}.ts"]}))

    run(generate, project, node_tools)
    run(["tsc", "-p", "tsconfig.json"], project, node_tools)
    topic = "ts-" + uuid.uuid4().hex[:10]
    out = run(["node", f"out/{program}.js", clients_broker.url, topic], project, node_tools)

    summary = json.loads(out.strip().splitlines()[-1])
    assert summary == {
        "held": "order 1 paid",
        "paid": ["order 1 paid"],
        "lag": 0,
        "received": ["order 1 created", "order 1 paid"],
        "keyed": ["order 1 created", "order 1 paid"],
        "batch": {"count": 2, "header_count": "2", "status": "FOUND"},
        "problem": "TOPIC_INVALID",
        "pushed": ["order 1 created", "order 1 paid"],
        "signed": True,
        "redrive": "done",
    }
