"""``window(..., late_to=...)``: a window writes its late messages (``LateMessage``) to an output
or an intermediate stream, as Flink's side output does; with ``allowed_lateness`` a message within
the lateness updates a LATE pane and one beyond it goes to ``late_to`` and is counted. Planned as
a second terminal of the window; run on TestRunner and on the embedded local system."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import LocalRunner
from runtime.summary import print_outputs
from samza_dsl import KV, LateMessage, StreamApplication, Triggers, Windows
from samza_dsl.errors import PlanError
from samza_dsl.serdes import JsonSerde, KVSerde, SafeSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner

RUN_TIMEOUT = 30.0
INPUT = {0: [KV("a", 1.0), KV("b", 25.0), KV("a", 3.0), KV("c", 4.0), KV("a", 31.0)],
         1: [KV("b", 2.0), KV("b", 45.0), KV("c", 5.5)]}


def et(kv: KV[str, float]) -> float:
    return kv.value


def keyed_counts() -> Any:
    return Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                  fold=lambda kv, n: n + 1, event_time=et)


def app_with_late_output(system: Any, window: Any = None,
                         late_serde: Any = None) -> StreamApplication:
    app = StreamApplication("lt")
    inp = app.input(system.input("in", partitions=2, serde=KVSerde(StringSerde(), JsonSerde())))
    late = app.output(system.output("late", serde=late_serde))
    panes = inp.window(window or keyed_counts(), name="w", late_to=late)
    panes.map(lambda p: (p.key.key, p.key.pane_id, p.firing.name, p.message), name="row") \
        .send_to(app.output(system.output("panes", serde=SafeSerde())))
    return app


def test_late_messages_go_to_the_late_to_output_with_what_they_missed() -> None:
    mem = MemorySystem()
    result = TestRunner(app_with_late_output(mem)).add_input("in", INPUT).run(timeout=RUN_TIMEOUT)
    late = sorted(result.messages("late"), key=lambda m: (m.partition, m.offset))
    assert late == [
        LateMessage(KV("a", 3.0), "lt-1-window-w", "a", "0", 3000, 25000, "in", 0, 2),
        LateMessage(KV("c", 4.0), "lt-1-window-w", "c", "0", 4000, 25000, "in", 0, 3),
        LateMessage(KV("c", 5.5), "lt-1-window-w", "c", "0", 5500, 45000, "in", 1, 2)]
    assert late[0].behind_ms == 22000
    assert result.late_counts == {"lt-1-window-w": {"in": 3}}
    assert result.metrics["lt-1-window-w.late-messages-sent"] == 3
    assert "lt-1-window-w.late-messages-dropped" not in result.metrics.snapshot()
    # the panes are those without late_to
    mem2 = MemorySystem()
    app = StreamApplication("lt")
    inp = app.input(mem2.input("in", partitions=2, serde=KVSerde(StringSerde(), JsonSerde())))
    inp.window(keyed_counts(), name="w").map(
        lambda p: (p.key.key, p.key.pane_id, p.firing.name, p.message), name="row").send_to(
        app.output(mem2.output("panes")))
    plain = TestRunner(app).add_input("in", INPUT).run(timeout=RUN_TIMEOUT)
    assert sorted(result.messages("panes")) == sorted(plain.messages("panes"))
    assert plain.late() == result.late() == 3


def test_a_keyed_late_to_stream_gets_the_message_key() -> None:
    mem = MemorySystem()
    app = app_with_late_output(mem, late_serde=KVSerde(StringSerde(), JsonSerde()))
    result = TestRunner(app).add_input("in", INPUT).run(timeout=RUN_TIMEOUT)
    assert sorted(m.key for m in result.messages("late")) == ["a", "c", "c"]
    # a LateMessage written by the stream's JsonSerde reads back as its fields
    fields = set(LateMessage.__struct_fields__)
    assert all(set(m.value) == fields for m in result.messages("late"))


def test_within_allowed_lateness_a_late_pane_beyond_it_late_to() -> None:
    w = keyed_counts().allowed_lateness(timedelta(seconds=10)).late_trigger(Triggers.count(1))
    mem = MemorySystem()
    app = app_with_late_output(mem, w)
    # 25 closes [0, 10) and [10, 20); [0, 10) is kept until 20, [10, 20) until 30. So 12 updates
    # [10, 20) in a LATE pane, 3 comes past [0, 10)'s lateness and 13 past [10, 20)'s (after 31)
    data = [KV("a", 1.0), KV("a", 11.0), KV("a", 25.0), KV("a", 12.0), KV("a", 3.0),
            KV("a", 31.0), KV("a", 13.0)]
    result = TestRunner(app).add_input("in", {0: data}).run(timeout=RUN_TIMEOUT)
    panes = result.messages("panes")
    assert ("a", "10000", "LATE", 2) in panes
    assert [(m.message.value, m.pane_id) for m in result.messages("late")] == [
        (3.0, "0"), (13.0, "10000")]
    assert result.late() == 2


def test_a_session_window_sends_its_late_messages_too() -> None:
    mem = MemorySystem()
    w = Windows.keyed_session(lambda kv: kv.key, timedelta(seconds=5), event_time=et)
    app = app_with_late_output(mem, w)
    result = TestRunner(app).add_input("in", {0: [KV("u", 1.0), KV("u", 20.0), KV("u", 2.0)]}
                                       ).run(timeout=RUN_TIMEOUT)
    [late] = result.messages("late")
    assert (late.message, late.pane_id, late.watermark_ms, late.offset) == (
        KV("u", 2.0), "2000", 20000, 2)
    assert result.late("w", stream="in") == 1


def late_intermediate_app(system: Any, name: str = "li",
                          topics: dict[str, str] | None = None) -> StreamApplication:
    """Counts per key and window; the late messages go through an intermediate stream to a
    ``map`` and the ``late`` output. ``topics`` maps stream ids to physical names."""
    topics = topics or {}
    serde = KVSerde(StringSerde(), JsonSerde())
    app = StreamApplication(name)
    inp = app.input(system.input("in", partitions=2, serde=serde, physical_name=topics.get("in")))
    panes = inp.window(keyed_counts(), name="w", late_to="late-views")
    panes.map(lambda p: KV(p.key.key, p.message), name="count").send_to(
        app.output(system.output("counts", serde=serde, physical_name=topics.get("counts"))))
    (panes.late_stream()
     .map(lambda m: KV(m.message.key,
                       [m.pane_id, m.behind_ms, m.stream, m.offset, m.message.value]),
          name="describe")
     .send_to(app.output(system.output("late", serde=serde, physical_name=topics.get("late")))))
    return app


EXPECTED_LATE = [KV("a", ["0", 22000, "in", 2, 3.0]), KV("c", ["0", 39500, "in", 2, 5.5]),
                 KV("c", ["0", 21000, "in", 3, 4.0])]


def test_late_to_an_intermediate_stream_read_back_by_the_job() -> None:
    result = TestRunner(late_intermediate_app(MemorySystem())).add_input("in", INPUT).run(
        timeout=RUN_TIMEOUT)
    assert sorted(result.messages("late"), key=lambda kv: (kv.key, kv.value[3])) == EXPECTED_LATE
    plan = result.plan
    assert "li-1-late-late-views" in plan.intermediate_streams
    assert plan.graph.edges["li-1-window-w", "stream:li-1-late-late-views"]["port"] == "late"


def test_late_to_on_the_local_system_through_the_log(tmp_path: Path) -> None:
    local = LocalSystem("local")
    app = late_intermediate_app(local)
    progress = io.StringIO()
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job"), "task.progress.ms": 50},
                         inputs={"in": INPUT}, progress=progress).run()
    try:
        # the late messages crossed an intermediate stream of the log as SafeSerde bytes
        assert sorted(runner.messages("late"), key=lambda kv: (kv.key, kv.value[3])) \
            == EXPECTED_LATE
        assert runner.late_counts == {"li-1-window-w": {"in": 3}}
        assert runner.status()["late"] == 3
        last = progress.getvalue().strip().splitlines()[-1].split("\r")[-1]
        assert "late      3" in last
        summary = io.StringIO()
        print_outputs(runner, summary)
        assert ("late: 3 message(s) sent to li-1-late-late-views by window li-1-window-w "
                "(3 from in)") in summary.getvalue()
    finally:
        runner.close()


def test_late_to_a_local_output_without_a_serde_is_json(tmp_path: Path) -> None:
    local = LocalSystem("local")
    runner = LocalRunner(app_with_late_output(local), {"job.dir": str(tmp_path / "job")},
                         inputs={"in": INPUT}).run()
    try:
        late = sorted(runner.messages("late"), key=lambda m: (m["partition"], m["offset"]))
        assert [(m["message"], m["pane_id"], m["offset"]) for m in late] == [
            ({"key": "a", "value": 3.0}, "0", 2), ({"key": "c", "value": 4.0}, "0", 3),
            ({"key": "c", "value": 5.5}, "0", 2)]
        json.dumps(late)
    finally:
        runner.close()


# -- planning -------------------------------------------------------------------------------------

def test_the_plan_draws_the_late_edge() -> None:
    plan = late_intermediate_app(MemorySystem()).plan()
    assert "li-1-late-late-views" in plan.stage_of("li-1-window-w").outputs
    assert "late: li-1-late-late-views" in plan.to_dot()
    assert "late: li-1-late-late-views" in plan.to_mermaid()
    assert "late_to=li-1-late-late-views" in plan.explain()
    out_plan = app_with_late_output(MemorySystem()).plan()
    assert '"lt-1-window-w" -> "stream:late" [label="late"' in out_plan.to_dot()
    assert "-.->|late|" in out_plan.to_mermaid()
    assert out_plan.to_dict()["operators"]["lt-1-window-w"]["late_to"] == "late"
    from planner.render import graph_from_json

    g = graph_from_json(out_plan.to_json())
    assert g.edges["lt-1-window-w", "stream:late"]["port"] == "late"
    # the late output partitions like any output
    assert out_plan.streams["late"].kind == "output"


def test_late_to_mistakes_are_plan_errors() -> None:
    mem = MemorySystem()
    app = StreamApplication("bad")
    inp = app.input(mem.input("in"))
    out = app.output(mem.output("late"))
    with pytest.raises(PlanError, match="processing time"):
        inp.window(Windows.tumbling(timedelta(seconds=1)), name="w", late_to=out)
        app.plan()
    other = StreamApplication("other").output(mem.output("x"))
    with pytest.raises(PlanError, match="another application"):
        inp.window(keyed_counts(), name="w2", late_to=other)
    with pytest.raises(PlanError, match="malformed"):
        inp.window(keyed_counts(), name="w3", late_to="no spaces")
    with pytest.raises(TypeError, match="late_to takes"):
        inp.window(keyed_counts(), name="w4", late_to=3)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="has no late stream"):
        inp.window(keyed_counts(), name="w5").late_stream()
    # an output descriptor is registered as an output
    inp.window(keyed_counts(), name="w6", late_to=mem.output("late-6")).sink(print)
    assert app.spec().operator("bad-1-window-w6").late_to == "late-6"  # type: ignore[attr-defined]
    assert "late-6" in app.spec().outputs

    app2 = StreamApplication("dangling")
    inp2 = app2.input(mem.input("in"))
    inp2.window(keyed_counts(), name="w", late_to="nobody").sink(print)
    with pytest.raises(PlanError, match="late_stream\\(\\) of the window"):
        app2.plan()


# -- nothing is lost --------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(st.dictionaries(st.integers(0, 1), st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 60_000)), max_size=30), max_size=2),
    st.sampled_from([0, 5]), st.booleans())
def test_every_message_is_in_a_pane_or_counted_late(parts: dict[int, list[tuple[str, int]]],
                                                    lateness_s: int, session: bool) -> None:
    """Conservation: the panes count every message but the late ones, and ``late_to`` gets
    exactly the late ones, with any disorder, allowed lateness and window kind."""
    w = (Windows.keyed_session(lambda kv: kv.key, timedelta(seconds=5), init=int,
                               fold=lambda kv, n: n + 1, event_time=et) if session
         else keyed_counts())
    if lateness_s:  # a LATE pane on every message within the lateness
        w = w.allowed_lateness(timedelta(seconds=lateness_s)).late_trigger(
            Triggers.repeat(Triggers.count(1)))
    app = app_with_late_output(MemorySystem(), w)
    # keys of their own per partition (task), so (key, pane id) names one pane of one task
    data = {p: [KV(f"{k}{p}", ms / 1000.0) for k, ms in msgs] for p, msgs in parts.items()}
    total = sum(len(m) for m in data.values())
    result = TestRunner(app).add_input("in", data).run(timeout=RUN_TIMEOUT)
    on_time: dict[tuple[str, str], int] = {}
    latest: dict[tuple[str, str], int] = {}  # the last LATE firing of a pane holds all of it
    for key, pane_id, firing, n in result.messages("panes"):
        (on_time if firing == "DEFAULT" else latest)[(key, pane_id)] = n
    within = sum(n - on_time.get(pane, 0) for pane, n in latest.items())
    assert sum(on_time.values()) + within + result.late() == total
    assert len(result.messages("late")) == result.late()
    assert lateness_s or not latest
