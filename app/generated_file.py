"""The command line of the generators of committed files (`python -m app.openapi_export PATH`,
`python -m app.settings_doc PATH`): one argument, the file to write whole."""

from __future__ import annotations

import sys
from collections.abc import Callable


def write_generated(argv: list[str], module: str, content: Callable[[], bytes]) -> int:
    """Write `content()` to the one path in `argv`; 2 (with a usage line) for any other arguments."""
    if len(argv) != 1:
        print(f"usage: python -m {module} PATH", file=sys.stderr)
        return 2
    with open(argv[0], "wb") as f:
        f.write(content())
    return 0
