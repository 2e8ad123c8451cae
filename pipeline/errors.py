"""The pipeline's small exception tree.

Expected failures of a source or sink (a bad option, a broker problem, a broker out of
reach, messages gone from a queue) are these exceptions; Spark turns one raised in a
task into a task failure whose message carries ours (and so the broker's problem code).
"""

from __future__ import annotations

from core import TidemqError


class PipelineError(TidemqError):
    """Raised when a tidemq source, sink or job cannot go on; the base of the pipeline's errors."""


class OptionInvalid(PipelineError, ValueError):
    """Raised when a source or sink option is missing or malformed."""

    def __init__(self, option: str, detail: str) -> None:
        super().__init__(f"option {option}: {detail}")
        self.option = option
        self.detail = detail


class BrokerProblem(PipelineError):
    """Raised when the broker answers a request with an error (an application/problem+json body)."""

    def __init__(self, status: int, code: str, detail: str, method: str = "", url: str = "") -> None:
        super().__init__(f"tidemq broker answered {status} {code}: {detail} ({method} {url})".rstrip())
        self.status = status
        self.code = code
        self.detail = detail


class BrokerUnavailable(PipelineError):
    """Raised when the broker cannot be reached (or keeps answering 503) after the bounded retries."""


class DataLost(PipelineError):
    """Raised when messages a query must read are gone from a queue (deleted by retention) and failOnDataLoss is on."""


class RowInvalid(PipelineError):
    """Raised when a row cannot be sent as a message (its body is null, or a field the encoding cannot carry)."""
