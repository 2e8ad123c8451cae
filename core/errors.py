"""The root of tidemq's exception tree, and the one error every package's settings raise.

Expected outcomes (of puts, gets, replication) are status enums; these exceptions are for
conditions that stop an operation as a whole. Each package has its branch under TidemqError:
StoreError (store/), HAError (ha/), EtcdError (cluster/), PipelineError (pipeline/),
ProblemError and StartRefused (app/), TidemqClientError (tidemq/).
"""

from __future__ import annotations


class TidemqError(Exception):
    """Raised when tidemq meets an expected condition that stops an operation; the root of every
    tidemq exception (StoreError, HAError, PipelineError, ProblemError, EtcdError, StartRefused, ...)."""


class ConfigInvalid(TidemqError):
    """Raised when a setting or a relation between settings is invalid (any package's settings)."""
