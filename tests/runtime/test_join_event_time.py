"""Event-time stream-stream joins (``join(..., within=)``) on TestRunner and the embedded local
system: ride requests joined with acceptances within 60 s over input with up to 4 s of disorder
(declared 5 s) equal the plain-Python answer; disorder past the bound makes late messages,
counted and sent to ``late_to``, and the answer is exactly the pairs of the messages that were
not late; a left join emits the unmatched requests."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from etjoin_app import BOUND_S, build, pairs, ride_time, rides

from runtime import LocalRunner
from samza_dsl import LateMessage, StreamApplication
from samza_dsl.errors import JoinPartitionError, TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
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


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_the_embedded_local_system_gives_the_plain_python_answer(
        tmp_path: Path, guarantee: str) -> None:
    reqs, accs = rides(random.Random(5), 1500, disorder_s=4.0)
    runner = LocalRunner(build(LocalSystem("local"), how="left", late_to="late"),
                         {"job.dir": str(tmp_path / "job"),
                          "job.processing.guarantee": guarantee},
                         inputs={"requests": reqs, "accepts": accs}).run()
    try:
        assert _rows(runner.messages("matches")) == pairs(reqs, accs, "left")
        assert runner.late_counts == {}
        assert runner.messages("late") == []
    finally:
        runner.close()


def test_a_run_reports_the_joins_late_messages_in_its_metrics_and_summary(
        tmp_path: Path) -> None:
    reqs, accs = rides(random.Random(11), 600, disorder_s=BOUND_S * 3)
    runner = LocalRunner(build(LocalSystem("local"), how="inner"),
                         {"job.dir": str(tmp_path / "job")},
                         inputs={"requests": reqs, "accepts": accs}).run()
    try:
        late = runner.late()
        assert late > 0
        samples = runner.metrics.samples()
        dropped = sum(v for g, n, labels, v in samples if g == "operator"
                      and n == "late-messages-dropped" and labels.get("operator") == JOIN)
        assert dropped == late
        summary = "\n".join(runner.late_summary())
        assert f"late: {late:,} message(s) dropped by join {JOIN}" in summary
    finally:
        runner.close()


def test_a_join_on_another_key_than_the_streams_fails_as_a_ttl_join_does(
        tmp_path: Path) -> None:
    reqs, accs = rides(random.Random(3), 200, disorder_s=1.0)
    local = LocalSystem("local")
    wrong = StreamApplication("rides")  # the same job, joined on the ride's number
    serde = KVSerde(StringSerde(), JsonSerde())
    req = wrong.input(local.input("requests", partitions=2, serde=serde, event_time=ride_time))
    acc = wrong.input(local.input("accepts", partitions=2, serde=serde, event_time=ride_time))
    req.join(acc, key=lambda kv: kv.value["ride"], other_key=lambda kv: kv.value["ride"],
             combine=lambda a, b: [a.key, b.key], within=timedelta(seconds=60),
             name="accepted").send_to(wrong.output(local.output("matches", serde=JsonSerde())))
    with pytest.raises(TaskError) as err:
        LocalRunner(wrong, {"job.dir": str(tmp_path / "job")},
                    inputs={"requests": reqs, "accepts": accs}).run()
    assert isinstance(err.value.__cause__, JoinPartitionError)
    assert err.value.op_id == JOIN
    assert "belongs to partition" in str(err.value) and "before the join" in str(err.value)


def _late_stream_app(system: Any) -> StreamApplication:
    app = StreamApplication("lt")
    serde = KVSerde(StringSerde(), JsonSerde())
    bound = timedelta(seconds=2)
    req = app.input(system.input("requests", partitions=2, serde=serde, event_time=ride_time,
                                 max_out_of_orderness=bound))
    acc = app.input(system.input("accepts", partitions=2, serde=serde, event_time=ride_time,
                                 max_out_of_orderness=bound))
    j = req.join(acc, key=lambda kv: kv.key, other_key=lambda kv: kv.key,
                 combine=lambda a, b: [a.value["ride"], b.value["ride"]],
                 within=timedelta(seconds=60), name="j", late_to="late")
    j.send_to(app.output(system.output("matches", serde=JsonSerde())))
    j.late_stream().map(lambda m: [m.pane_id, m.message.value["ride"], m.event_time_ms],
                        name="describe").send_to(app.output(system.output("late",
                                                                          serde=JsonSerde())))
    return app


def test_late_stream_reads_the_joins_late_messages_alike_on_both_runners(
        tmp_path: Path) -> None:
    reqs, accs = rides(random.Random(3), 300, disorder_s=8.0)
    mem = TestRunner(_late_stream_app(MemorySystem())).add_input("requests", reqs) \
        .add_input("accepts", accs).run(timeout=RUN_TIMEOUT)
    local = LocalRunner(_late_stream_app(LocalSystem("local")),
                        {"job.dir": str(tmp_path / "job")},
                        inputs={"requests": reqs, "accepts": accs}).run()
    try:
        late = _rows(mem.messages("late"))
        assert late and mem.late() == len(late)
        assert _rows(local.messages("late")) == late
        gone = {(side, ride) for side, ride, _ in late}
        on_time = ([r for r in reqs if ("left", r.value["ride"]) not in gone],
                   [a for a in accs if ("right", a.value["ride"]) not in gone])
        assert _rows(mem.messages("matches")) == _rows(local.messages("matches")) \
            == pairs(*on_time)
    finally:
        local.close()
