"""The Spark tests share the session-wide ``spark`` fixture (tests/conftest.py); the cluster
tests share ``spark_cluster``, a standalone master and worker on 127.0.0.1."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import spark_apps

import standalone  # noqa: E402 - from the directory just put on the path


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[standalone.StandaloneCluster]:
    """A Spark standalone master and one worker (2 cores, 1 GB), started from the installed
    pyspark and stopped at the end. Without Java this fails: Spark tests never skip."""
    try:
        cluster = standalone.start(tmp_path_factory.mktemp("spark-cluster"))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()
