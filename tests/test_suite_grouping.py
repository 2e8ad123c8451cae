"""The suite's own distribution: under `--dist loadgroup` every test carries its xdist group.

A pytest or pytest-xdist release that stops the grouping fails nothing else: the tests are then
spread one by one, each worker starting its own JVM and its own module brokers, and the suite
only grows slower. This test makes that visible.
"""

from __future__ import annotations

import pytest


def test_runs_in_its_module_group_under_loadgroup(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):  # set in xdist's workers under --dist loadgroup
        pytest.skip("not distributed by xdist's loadgroup (a plain run)")
    assert request.node.nodeid.endswith("@tests/test_suite_grouping.py"), request.node.nodeid
