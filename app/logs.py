"""Logging: one format for tidemq's and uvicorn's lines, as text or as one JSON object per line.

`log_config` builds the `logging.config.dictConfig` dictionary both the CLI applies at start and
uvicorn applies again when its server is configured (uvicorn's `log_config`), so uvicorn's own
loggers keep no handler of their own: their records propagate to the one root handler on stderr.

- text: `2026-11-23T13:06:44.123Z INFO tidemq.app: message key=value ...` (extra fields last, but
  those a record names in its `_in_message` extra: the message already says them).
- json: `{"time": ..., "level": ..., "logger": ..., "message": ..., <extra fields>}`, one per line;
  an exception's traceback is the `exc_info` field.
"""

from __future__ import annotations

import logging
import logging.config
import time
from typing import Any

import orjson

LOG_FORMATS = ("text", "json")
ACCESS_LOGGER = "tidemq.access"
# The one line naming the bound address ("listening on URL"): written whatever the level, so that
# whoever started the broker on `--port 0` learns its port.
LISTEN_LOGGER = "tidemq.listen"
# uvicorn's loggers; they propagate to the root handler instead of printing in their own format.
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
# Attributes every LogRecord has; any other attribute came from `extra=` and is printed as a field.
STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
# uvicorn's `extra` with an ANSI-coloured copy of the message: never printed (nor extras named `_...`).
IGNORED_EXTRAS = frozenset({"color_message"})


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a call passed with `extra=`, in the order given."""
    return {k: v for k, v in record.__dict__.items() if k not in STANDARD_ATTRIBUTES and k not in IGNORED_EXTRAS and not k.startswith("_")}


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message key=value ...`, the time in UTC with milliseconds."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        said = getattr(record, "_in_message", ())
        fields = {k: v for k, v in extra_fields(record).items() if k not in said}
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then the extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)  # an extra field never hides one of the four above
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        # orjson: the access log formats a line per request; anything it cannot encode is written as str().
        return orjson.dumps(entry, default=str).decode()


def python_level(level: str) -> str:
    """The logging module's level name of a tidemq log level (uvicorn's "trace" is below DEBUG: DEBUG here)."""
    return "DEBUG" if level == "trace" else level.upper()


def log_config(level: str, log_format: str) -> dict[str, Any]:
    """The dictConfig of the process: one stderr handler on the root logger, uvicorn's loggers propagating to it."""
    formatter = JsonFormatter if log_format == "json" else TextFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"tidemq": {"()": f"{formatter.__module__}.{formatter.__qualname__}"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "tidemq", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": python_level(level)},
        "loggers": {
            **{name: {"handlers": [], "propagate": True} for name in UVICORN_LOGGERS},
            # Lines only --access-log asks for: written whatever the level of the rest.
            ACCESS_LOGGER: {"level": "INFO"},
            LISTEN_LOGGER: {"level": "INFO"},
        },
    }


def configure(level: str, log_format: str) -> dict[str, Any]:
    """Apply `log_config` now and return it (uvicorn is given the same dictionary)."""
    config = log_config(level, log_format)
    logging.config.dictConfig(config)
    return config
