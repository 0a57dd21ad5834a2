"""SparkRunner counts late messages as the streaming runtime does and writes them to a window's
``late_to`` stream (an output, or an intermediate stream the job reads back)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from runtime.spark import SparkRunner
from runtime.testing import TestRunner
from samza_dsl.systems import MemorySystem

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from test_late_to import (  # noqa: E402
    INPUT,
    app_with_late_output,
    late_intermediate_app,
)


def test_late_messages_on_spark_equal_the_test_runner(spark: Any) -> None:
    expected = TestRunner(app_with_late_output(MemorySystem())).add_input("in", INPUT).run()
    result = SparkRunner(spark).reprocess(app_with_late_output(MemorySystem()), {"in": INPUT})
    # the input declares no event time: each partition is read in order, late as when streamed
    assert sorted(result.messages("late"), key=repr) == sorted(expected.messages("late"),
                                                                key=repr)
    assert len(result.messages("late")) == 3
    assert sorted(result.messages("panes")) == sorted(expected.messages("panes"))
    assert result.late_counts == expected.late_counts == {"lt-1-window-w": {"in": 3}}
    assert result.late("w", stream="in") == 3
    assert "late: 3 message(s) sent to late by window lt-1-window-w (3 from in)" \
        in result.summary()


def test_late_messages_through_an_intermediate_stream_on_spark(spark: Any) -> None:
    expected = TestRunner(late_intermediate_app(MemorySystem())).add_input("in", INPUT).run()
    result = SparkRunner(spark).reprocess(late_intermediate_app(MemorySystem()), {"in": INPUT})
    assert sorted(result.messages("late"), key=repr) == sorted(expected.messages("late"), key=repr)
    assert sorted(result.messages("counts"), key=repr) == sorted(expected.messages("counts"),
                                                                 key=repr)
    assert result.late() == 3
    assert result.rows_out["li-1-late-late-views"] == 3
