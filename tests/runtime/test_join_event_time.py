"""Event-time stream-stream joins (``join(..., within=)``) on TestRunner and the embedded local
system: ride requests joined with acceptances within 60 s over input with up to 4 s of disorder
(declared 5 s) equal the plain-Python answer; disorder past the bound makes late messages,
counted and sent to ``late_to``, and the answer is exactly the pairs of the messages that were
not late; a left join emits the unmatched requests."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from etjoin_app import BOUND_S, build, pairs, rides

from runtime import LocalRunner
from samza_dsl import LateMessage
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner

RUN_TIMEOUT = 60.0
JOIN = "rides-1-join-accepted"


def _rows(messages: list[Any]) -> list[list[Any]]:
    return sorted((list(m) for m in messages), key=repr)


@pytest.mark.parametrize("how", ["inner", "left"])
def test_testrunner_joins_within_60s_over_disordered_input(how: str) -> None:
    reqs, accs = rides(random.Random(62), 1500, disorder_s=4.0)
    expected = pairs(reqs, accs, how)
    assert len(expected) > 1000
    far = pairs(reqs, accs, how, within_s=10**6)
    assert len(far) > len(expected) + 500  # many pairs of one driver more than 60 s apart
    mem = MemorySystem()
    result = TestRunner(build(mem, how=how)).add_input("requests", reqs) \
        .add_input("accepts", accs).run(timeout=RUN_TIMEOUT)
    assert _rows(result.messages("matches")) == expected
    assert result.late() == 0


def test_disorder_past_the_declared_bound_makes_late_messages_and_only_those_miss() -> None:
    reqs, accs = rides(random.Random(7), 1500, disorder_s=BOUND_S * 3)
    mem = MemorySystem()
    result = TestRunner(build(mem, how="left", late_to="late")).add_input("requests", reqs) \
        .add_input("accepts", accs).run(timeout=RUN_TIMEOUT)
    late = result.messages("late")
    assert late and all(isinstance(m, LateMessage) and m.window == JOIN for m in late)
    assert all(m.event_time_ms < m.watermark_ms for m in late)
    assert result.late() == len(late) == sum(result.late_counts[JOIN].values())
    assert set(result.late_counts[JOIN]) <= {"requests", "accepts"}
    gone = {(m.pane_id, m.message.value["ride"]) for m in late}
    on_time = ([r for r in reqs if ("left", r.value["ride"]) not in gone],
               [a for a in accs if ("right", a.value["ride"]) not in gone])
    assert _rows(result.messages("matches")) == pairs(*on_time, how="left")


def test_the_embedded_local_system_gives_the_plain_python_answer(tmp_path: Path) -> None:
    reqs, accs = rides(random.Random(5), 1500, disorder_s=4.0)
    runner = LocalRunner(build(LocalSystem("local"), how="left", late_to="late"),
                         {"job.dir": str(tmp_path / "job")},
                         inputs={"requests": reqs, "accepts": accs}).run()
    try:
        assert _rows(runner.messages("matches")) == pairs(reqs, accs, "left")
        assert runner.late_counts == {}
        assert runner.messages("late") == []
    finally:
        runner.close()
