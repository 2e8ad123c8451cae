"""Fixtures every test package may use: one SparkSession for the whole run (starting one costs seconds).

Hypothesis runs without its time checks (the per-example deadline and the slow-generation health
check): they measure the machine, which the suite shares with other work, not the code; performance
is measured by the benchmarks. Every other health check stays on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("tidemq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tidemq")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A local[2] SparkSession with tidemq's sources registered, shared by the pipeline and interop tests."""
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from pipeline import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tidemq-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's `--dist loadgroup`, marked before xdist's own hook reads the marks
    (without tryfirst it runs first and finds none: every test was then a group of its own).

    Every Spark test is in one group, so the run starts one JVM, not one per worker; every other test
    is grouped with its module, so a module-scoped fixture (a broker, a benchmark run) is set up once.
    xdist hands the groups out in the order of the items, so the longest go first (the Spark group,
    then the modules holding a test marked slow): a long group started last would leave the other
    workers idle at the end."""
    spark = [item for item in items if item.get_closest_marker("spark") is not None]
    others = [item for item in items if item.get_closest_marker("spark") is None]
    for item in spark:
        item.add_marker(pytest.mark.xdist_group("spark"))
    for item in others:
        item.add_marker(pytest.mark.xdist_group(module_of(item)))
    slow_modules = {module_of(item) for item in others if item.get_closest_marker("slow") is not None}
    slow = [item for item in others if module_of(item) in slow_modules]
    rest = [item for item in others if module_of(item) not in slow_modules]
    items[:] = spark + slow + rest


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]
