"""The store's branch of tidemq's exception tree (its root, TidemqError, is core's).

Expected outcomes of puts and gets are status enums (store/status.py); these
exceptions are for conditions that stop an operation as a whole (a broken
configuration, a directory already in use, a corrupt metadata file).
"""

from __future__ import annotations

from core.errors import TidemqError


class StoreError(TidemqError):
    """Raised when the store cannot carry out an operation; the base of all store errors."""


class StoreLocked(StoreError):
    """Raised when another process already holds the store directory's lock file."""


class StoreNotRunning(StoreError):
    """Raised when an operation needs a loaded, started store and it is not."""


class MetadataCorrupt(StoreError):
    """Raised when a metadata file (topics, offsets, checkpoint) cannot be parsed."""


class TopicConfigInvalid(StoreError):
    """Raised when a topic's queue count or permission is out of range."""


class TopicInvalid(StoreError):
    """Raised when a topic name breaks the naming rules (charset, length)."""


class DispatchFailed(StoreError):
    """Raised when a dispatcher cannot record a message (a queue or index file cannot be made); dispatch retries it."""
