"""The client package stands alone: importing it loads none of the broker's packages."""

from __future__ import annotations

import subprocess
import sys

from tests.app.conftest import ROOT

BROKER_PACKAGES = ("app", "store", "ha", "pipeline")


def test_the_client_imports_no_broker_package() -> None:
    code = (
        "import sys, tidemq, tidemq.cli, tidemq.client, tidemq.async_client; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({BROKER_PACKAGES!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
