"""A Spark pass whose one entry is a window runs its records through the streaming task's batch
run (``runtime.engine.batch_operator.operator_run``), as messages or as columns (``RunColumns``): panes leave
stamped with the record that closed them, a failure names its record, the meter counts every
record. No Spark session: the executor runs alone."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from operators.base import Operator
from runtime.memory import resolve_partitions
from runtime.spark.executor import PassExecutor, PassFailure
from runtime.spark.meter import IN, OUT
from runtime.spark.shuffle import Records
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.spec import WindowSpec
from samza_dsl.systems import MemorySystem

SPARK = Path(__file__).resolve().parents[2] / "runtime" / "spark"


def _executor() -> tuple[PassExecutor, str, str]:
    """The window pass of ``views -> partition_by(k) -> window(4 s, count) -> out``: the
    executor, the window's input stream and the window's op id."""
    app = StreamApplication("window-run")
    mem = MemorySystem()
    views = app.input(mem.input("views", event_time=lambda m: m["ts"]))
    (views.partition_by(lambda m: m["k"], name="by-k")
        .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=4),
                                       init=lambda: 0, fold=lambda kv, n: n + 1,
                                       event_time=lambda kv: kv.value["ts"]), name="w")
        .send_to(app.output(mem.output("out"))))
    plan = app.plan(partitions={"views": 1})
    window = next(op.op_id for op in plan.app.operators if isinstance(op, WindowSpec))
    stage = next(s for s in plan.stages if window in s.operators)
    ex = PassExecutor(plan, [stage.stage_id], 0, resolve_partitions(plan), plan.config)
    return ex, stage.inputs[0], window


def _records(sid: str, ts: list[Any], columns: bool) -> Any:
    """Records of key "a" at times ``ts`` (s), sorted by them; as columns (keys and a ``ts``
    field, as a carried shuffle gives them) or as tuples."""
    msgs = [KV("a", {"k": "a", "ts": t}) for t in ts]
    sort = [int((t or 0) * 1000) for t in ts]
    clock = [s + 7 for s in sort]
    if not columns:
        return [(sid, s, 0, off, c, m)
                for off, (s, c, m) in enumerate(zip(sort, clock, msgs, strict=True))]
    return Records([sid] * len(ts), sort, [0] * len(ts), list(range(len(ts))), clock, msgs,
                   sid, keys=["a"] * len(ts), fields={"ts": pa.array(ts, pa.float64())})


@pytest.mark.parametrize("columns", [False, True])
def test_a_pane_leaves_stamped_with_the_record_that_closed_it(columns: bool) -> None:
    ex, sid, window = _executor()
    out = ex.feed(_records(sid, [1.0, 2.0, 3.0, 5.0, 6.0, 9.0], columns))
    # the window's own watermark: 5 s closes [0, 4), 9 s closes [4, 8)
    panes = [(rec[1], rec[4], rec[5].message) for _, rec in out]
    assert panes == [(5000, 5007, 3), (9000, 9007, 2)], panes
    out = ex.finish()
    assert [(rec[1], rec[5].message) for _, rec in out] == [(9000, 1)]
    meter = ex.meters[window]
    assert meter[IN] == 6 and meter[OUT] == 3, meter


@pytest.mark.parametrize("columns", [False, True])
def test_a_record_the_window_fails_on_is_named_by_its_offset(columns: bool) -> None:
    ex, sid, window = _executor()
    with pytest.raises(PassFailure) as info:  # no time: the window's event time fails on it
        ex.feed(_records(sid, [1.0, 2.0, 5.0, None, 6.0], columns))
    msg = str(info.value)
    assert f"operator {window!r}" in msg and f"stream {sid!r}" in msg, msg
    assert "partition 0 offset 3" in msg and "TypeError" in msg, msg
    assert ex.meters[window][IN] == 4  # the three before it, and it (as a task counts)


def test_spark_finds_no_operator_hook_by_name_and_leaves_the_window_run_to_the_batch_module(
        ) -> None:
    """The hooks are declared on ``Operator`` (read, never looked up with getattr/hasattr);
    a failure's index in a run is the batch module's to report (``BatchFailure``), not Spark's
    to catch from the operator (``FailedAt``)."""
    hooks = {name for name in vars(Operator) if not name.startswith("__")}
    found = []
    for path in sorted(SPARK.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in hooks:
                found.append(f"{path.name}:{node.lineno} {node.func.id} {node.args[1].value}")
            if isinstance(node, ast.Name) and node.id == "FailedAt":
                found.append(f"{path.name}:{node.lineno} FailedAt")
    assert not found, found
