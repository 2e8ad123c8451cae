"""Fixtures of the pipeline tests: a real tidemq server and a SparkSession, one of each per module.

The Spark session is module-scoped (one costs seconds to start); PYSPARK_PYTHON is this
interpreter, which has tidemq installed, so the workers can import `pipeline`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.pipeline.pipeline_helpers import Server, start_server, stop_server


@pytest.fixture(scope="module")
def tidemq_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("tidemq"))
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
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
