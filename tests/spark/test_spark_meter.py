"""A Spark task meters its operators with the streaming runtime's meter and chain
(``runtime.spark.meter``), and a pass runs by the first registered strategy whose condition it
meets (``runtime.spark.runner.PASS_STRATEGIES``). No Spark session: the executor runs alone."""

from __future__ import annotations

from datetime import timedelta

from operators.base import Operator
from operators.window import WindowOperator
from runtime.host.metrics import OpMeter
from runtime.memory import resolve_partitions
from runtime.spark.executor import PassExecutor
from runtime.spark.meter import IN, NS, OUT, PANES
from runtime.spark.runner import PASS_STRATEGIES
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.systems import MemorySystem


def _app() -> StreamApplication:
    mem = MemorySystem()
    app = StreamApplication("metered")
    w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                               fold=lambda kv, n: n + 1, event_time=lambda kv: kv.value)
    (app.input(mem.input("in"))
     .filter(lambda kv: kv.value >= 0, name="kept")
     .window(w, name="w", late_to=app.output(mem.output("late")))
     .map(lambda pane: (pane.key.key, pane.message), name="row")
     .send_to(app.output(mem.output("counts"))))
    return app


def test_each_operator_has_the_streaming_meter_and_its_first_message_is_timed() -> None:
    app = _app()
    plan = app.plan(partitions={"in": 1})
    (stage,) = plan.stages
    ex = PassExecutor(plan, [stage.stage_id], 0, resolve_partitions(plan), plan.config,
                      narrow=True)
    # times 1, 25 and 3 s: the window's own watermark passes 3 s's pane, which is late
    ex.run([("in", 0, 0, i, 0, KV("a", t)) for i, t in enumerate([1, 25, 3, -1])])
    assert all(type(m) is OpMeter for m in ex.op_meters.values())
    ids = {spec.name: spec.op_id for spec in app.spec().operators if spec.name}
    meters = ex.meters
    assert meters[ids["kept"]][IN] == 4 and meters[ids["kept"]][OUT] == 3
    window = meters[ids["w"]]
    # two panes (0 s, 20 s) and the late message, sent to "late"
    assert window[IN] == 3 and window[OUT] == 3 and window[PANES] == 2
    assert meters[ids["row"]][IN] == 2
    # a few messages each: the sampled meter still timed every operator's first one
    assert all(m[NS] > 0 for m in meters.values()), meters


def test_a_window_declares_its_fold_for_runs_given_as_columns() -> None:
    assert Operator.process_columns is None and Operator.fold_fn is None
    app = _app()
    plan = app.plan(partitions={"in": 1})
    (stage,) = plan.stages
    ex = PassExecutor(plan, [stage.stage_id], 0, resolve_partitions(plan), plan.config)
    window = next(op for op in ex.operators.values() if isinstance(op, WindowOperator))
    assert window.fold_fn is not None and window.fold_fn(None, 1) == 2
    assert window.process_columns is not None


def test_a_pass_runs_by_the_first_strategy_it_meets_and_the_last_takes_every_pass() -> None:
    names = [s.name for s in PASS_STRATEGIES]
    assert names == ["carried", "narrow-arrow", "narrow", "narrow-sorted", "shuffled",
                     "shuffled-union"]
    assert PASS_STRATEGIES[-1].when(object()) is True  # type: ignore[arg-type]
