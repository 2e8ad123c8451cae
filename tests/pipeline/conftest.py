"""Fixtures of the pipeline tests: a real tidemq server per module.

The SparkSession is tests/conftest.py's, one for the whole run (one costs seconds to start);
PYSPARK_PYTHON is this interpreter, which has tidemq installed, so the workers can import `pipeline`.
"""

from __future__ import annotations

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
