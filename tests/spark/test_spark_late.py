"""Late messages on SparkRunner: a window's ``late_to`` stream (an output, or an intermediate
stream the job reads back) plans and runs there, the late counts come back in
``ReprocessResult``, and no message is ever lost: each is in a pane or counted late."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from runtime.spark import SparkRunner
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.systems import MemorySystem

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from test_late_to import (  # noqa: E402
    INPUT,
    app_with_late_output,
    late_intermediate_app,
)

#: INPUT with each partition in event-time order
IN_ORDER = {p: sorted(msgs, key=lambda kv: kv.value) for p, msgs in INPUT.items()}


def test_late_to_runs_on_spark_and_equals_the_test_runner(spark: Any) -> None:
    for build, outputs in ((app_with_late_output, ("panes", "late")),
                           (late_intermediate_app, ("counts", "late"))):
        expected = TestRunner(build(MemorySystem())).add_input("in", IN_ORDER).run()
        result = SparkRunner(spark).reprocess(build(MemorySystem()), {"in": IN_ORDER})
        for sid in outputs:
            assert sorted(result.messages(sid), key=repr) == sorted(expected.messages(sid),
                                                                    key=repr), sid
        assert result.late_counts == expected.late_counts == {}
        assert "late: no late messages" in result.summary()


def test_no_message_is_lost_on_spark(spark: Any) -> None:
    """Out-of-order input: Spark closes panes on event time it has sorted, so a message is in
    its pane or, if the run counts it late, in the late_to output."""
    result = SparkRunner(spark).reprocess(app_with_late_output(MemorySystem()), {"in": INPUT})
    counted = sum(n for _, _, firing, n in result.messages("panes") if firing == "DEFAULT")
    total = sum(len(m) for m in INPUT.values())
    assert counted + result.late() == total
    assert len(result.messages("late")) == result.late()
    assert result.metrics.get("lt-1-window-w.late-messages-sent", 0) == result.late()


def test_a_window_on_another_time_than_the_input_s_counts_its_late_messages(spark: Any) -> None:
    """The input declares its event time (``seq``), the window another one (``t``) that is out of
    order against it: on Spark the window sees the records in ``seq`` order, so some come after
    their pane closed; they are counted, summed over the tasks, and sent to ``late_to``."""
    app = StreamApplication("other-time")
    mem = MemorySystem()
    inp = app.input(mem.input("in", partitions=2, event_time=lambda kv: kv.value["seq"]))
    late = app.output(mem.output("late"))
    w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                               fold=lambda kv, n: n + 1, event_time=lambda kv: kv.value["t"])
    inp.window(w, name="w", late_to=late).map(lambda p: p.message, name="n").send_to(
        app.output(mem.output("counts")))
    times = {0: [1, 25, 3, 4, 31], 1: [2, 45, 5]}  # t in seq order: 3, 4 and 5 come late
    data = {p: [KV(f"k{p}", {"seq": i, "t": t}) for i, t in enumerate(ts)]
            for p, ts in times.items()}
    result = SparkRunner(spark).reprocess(app, {"in": data})
    assert result.late_counts == {"other-time-1-window-w": {"in": 3}}
    assert sorted(m.message.value["t"] for m in result.messages("late")) == [3, 4, 5]
    assert sum(result.messages("counts")) + result.late() == 8
    assert "late: 3 message(s) sent to late by window other-time-1-window-w (3 from in)" \
        in result.summary()
