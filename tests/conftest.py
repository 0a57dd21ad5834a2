"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark_classes import java_options

# pytest keeps the test modules whose asserts it rewrote (as *-pytest-*.pyc) only where Python
# may write bytecode: where PYTHONDONTWRITEBYTECODE is set, as in many containers, each pytest
# run rewrote all of them again, about 13 s of CPU a collection of the whole suite. This process
# only: what the tests start keeps the environment's setting
sys.dont_write_bytecode = False

# every Spark JVM the tests start, here or in a subprocess (a CLI run, spark-submit): the client
# compiler and the class archive of ./dev setup (tests/spark_classes.py)
os.environ.setdefault("SPARK_SUBMIT_OPTS", java_options())


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A real SparkSession in local[2] for the whole run (started on first use). Without Java
    or PySpark this fails: Spark tests never skip."""
    from runtime.spark import spark_session

    session = spark_session("local[2]", "samza-dsl-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No process a test forked outlives the session: one still running at the end would keep
    the interpreter from exiting (multiprocessing waits for its children), so it is killed, and
    named, and the session fails."""
    import multiprocessing

    left = multiprocessing.active_children()
    for proc in left:
        proc.kill()
        proc.join(10)
    if left:
        names = ", ".join(f"{p.name} (pid {p.pid})" for p in left)
        print(f"\nprocesses a test started were still running at the end, killed: {names}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
