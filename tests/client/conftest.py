"""The client tests use the app tests' real broker processes (tests/app/conftest.py)."""

from __future__ import annotations

from tests.app.conftest import client, make_broker, shared_broker, topic  # noqa: F401  (fixtures)
