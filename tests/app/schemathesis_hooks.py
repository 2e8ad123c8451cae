"""Hooks for the schemathesis run of tests/app/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

schemathesis puts a generated path parameter's `%` into the URL as it is, so `%EF` in a generated group
name reaches the server as the byte 0xEF and names another group than the one generated. RocketMQ's
names take `%` (`%RETRY%`, `%DLQ%`), so the spec allows it; the hook sends it encoded, as a client must.
"""

from __future__ import annotations

from typing import Any

import schemathesis


@schemathesis.hook
def before_call(context: Any, case: Any, **kwargs: Any) -> None:
    params = case.path_parameters or {}
    for name, value in params.items():
        if isinstance(value, str) and "%" in value:
            params[name] = value.replace("%", "%25")
