"""Spark's stores encode and decode as the job's and TestRunner's do (issue 62, "one answer on
every runner"): each task of a pass keeps its window, join and table state in the job's
write-back layer over bytes in memory (``runtime.state.memory_store``), through the job's
codecs, committed after each batch it is fed and at the end of the pass. So what fails in the
job's store fails on Spark (local[2]) with TestRunner's line, naming where the pass had got to,
and a table's value reads back as the job reads it. The applications are those of
tests/runtime/test_testrunner_stores.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.spark import ReprocessError, SparkRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import SamzaError
from samza_dsl.systems import MemorySystem

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from test_testrunner_stores import (  # noqa: E402
    COMMIT_OFTEN,
    JOINED,
    context_writer,
    run,
    tuple_values,
    undeclared_fold,
    undeclared_join,
)


def reprocess(spark: Any, build: Any, inputs: dict[str, list[Any]],
              config: dict[str, Any] | None = None) -> list[Any]:
    """The output of ``build``'s app reprocessed on Spark with ``config``."""
    app: StreamApplication = build(MemorySystem())
    return SparkRunner(spark).reprocess(app, inputs, config=config).messages("out")


def same_failure(spark: Any, build: Any, inputs: dict[str, list[Any]], tmp_path: Path,
                 config: dict[str, Any] | None = None) -> str:
    """Spark's one-line error, which holds TestRunner's (a store in memory in both) and says
    at which commit it failed."""
    with pytest.raises(SamzaError) as test:
        run("test", build, inputs, tmp_path, config)
    with pytest.raises(ReprocessError) as info:
        reprocess(spark, build, inputs, config)
    text = str(info.value)
    assert "\n" not in text and "Traceback" not in text
    assert str(test.value) in text
    assert re.search(r"; at the commit after (stream '\w+' \(partition 0, row \d+\)|the end of "
                     r"the stream)", text), text
    return text


def test_a_window_fold_of_an_undeclared_class_fails_on_spark_as_in_the_job(
        spark: Any, tmp_path: Path) -> None:
    inputs = {"in": [KV("k", i % 5) for i in range(20_000)]}
    text = same_failure(spark, undeclared_fold, inputs, tmp_path, COMMIT_OFTEN)
    assert ("store 'tally-1-window-per-key' of task 'Partition 0' in memory: cannot encode the "
            "entry for key (1000000, 'k')") in text
    assert "SafeSerde() cannot write a value of type Tally" in text


def test_a_join_keeping_an_undeclared_class_fails_on_spark_as_in_the_job(
        spark: Any, tmp_path: Path) -> None:
    text = same_failure(spark, undeclared_join, JOINED, tmp_path, COMMIT_OFTEN)
    assert ("store 'tj-1-join-j-L' of task 'Partition 0' in memory: cannot encode the entry "
            "for key 'k'") in text


def test_keys_and_values_a_tables_serde_cannot_encode_fail_on_spark_as_in_the_job(
        spark: Any, tmp_path: Path) -> None:
    text = same_failure(spark, context_writer, {"in": [KV("a", "x"), KV("five", "y")]},
                        tmp_path / "key")
    assert ("store 't' of task 'Partition 0' in memory: cannot encode the entry for key 5 "
            "(SerdeError: table 't': cannot serialize a key (StringSerde() cannot encode int "
            "5") in text
    text = same_failure(spark, context_writer, {"in": [KV("a", "x"), KV("b", "complex")]},
                        tmp_path / "value")
    assert "cannot encode the entry for key 'b'" in text and "cannot serialize a value" in text


def test_a_tuple_value_in_a_json_table_reads_back_on_spark_as_in_the_job(
        spark: Any, tmp_path: Path) -> None:
    """Cached, a value is the object written; evicted (an object cache of 1), what JSON
    decodes: a list."""
    inputs = {"in": [KV(k, i) for i, k in enumerate("abcab")]}
    for config in ({}, {"stores.t.object.cache.size": "1"}):
        got = reprocess(spark, tuple_values, inputs, config)
        assert got == run("test", tuple_values, inputs, tmp_path / str(len(config)), config)
        last = got[-1].value
        assert ("value=[3, 'seen']" in last) == bool(config) and "value=(4, 'seen')" in last
