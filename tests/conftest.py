"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A real SparkSession in local[2] for the whole run (started on first use). Without Java
    or PySpark this fails: Spark tests never skip."""
    from runtime.spark import spark_session

    session = spark_session("local[2]", "samza-dsl-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
