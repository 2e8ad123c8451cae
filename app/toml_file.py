"""Reading the broker's TOML files (settings, ACL): a file that cannot be read or parsed is a
configuration error naming the file, in the exception type of the caller's kind of file."""

from __future__ import annotations

import tomllib
from typing import Any

from core import ConfigInvalid


def read_toml(path: str, kind: str, error: type[ConfigInvalid] = ConfigInvalid) -> dict[str, Any]:
    """The document at `path`; `error` when it cannot be read or is not TOML (`kind` names the file: "ACL file")."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise error(f"cannot read {kind} {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise error(f"{kind} {path} is not valid TOML: {e}") from e
