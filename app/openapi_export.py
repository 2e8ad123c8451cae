"""`python -m app.openapi_export PATH` writes the API's OpenAPI spec (what `make openapi` runs).

The spec depends only on the code, not on a store: the app is built with default settings
and never started, over a temporary directory.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

import orjson

from app.generated_file import write_generated
from app.server import create_app
from app.settings import BrokerSettings


def spec() -> dict[str, Any]:
    # A throwaway directory: building the app must not leave a ./data behind.
    with tempfile.TemporaryDirectory(prefix="tidemq-openapi-") as tmp:
        return create_app(BrokerSettings(store_dir=tmp).validate()).openapi()


def spec_bytes() -> bytes:
    """The spec as written to openapi/openapi.json (sorted keys, indented, final newline)."""
    return orjson.dumps(spec(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


if __name__ == "__main__":
    raise SystemExit(write_generated(sys.argv[1:], "app.openapi_export", spec_bytes))
