"""Per-operator counts and times of a reprocessing run (``ReprocessResult.operators``) on real
PySpark local[2]: each operator's messages in and out are what the pipeline did to the input
(computed here from the input, without the runtime), every operator that ran spent time, a
window's panes and late drops are the panes it wrote and the late messages the run counts, and
the summary prints them as a table, one line per operator in plan order."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from runtime.spark import SparkRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.systems import MemorySystem

METRICS = ("messages-in", "messages-out", "handle-ns")


def op_ids(app: StreamApplication) -> dict[str, str]:
    """Operator name -> op id."""
    return {spec.name: spec.op_id for spec in app.spec().operators if spec.name}


def test_counts_are_what_each_narrow_operator_did(spark: Any) -> None:
    app = StreamApplication("meters")
    mem = MemorySystem()
    (app.input(mem.input("nums"))
     .filter(lambda n: n % 3 == 0, name="thirds")
     .flat_map(lambda n: [n, -n], name="twice")
     .map(lambda n: n * 10, name="tens")
     .send_to(app.output(mem.output("out"))))
    data = {0: list(range(0, 300)), 1: list(range(300, 600))}
    result = SparkRunner(spark).reprocess(app, {"nums": data})
    n = 600
    assert len(result.messages("out")) == 2 * n // 3

    ids = op_ids(app)
    ops = result.operators
    # every operator of the plan, in plan order
    assert list(ops) == [op for s in result.plan.stages for op in s.operators]
    assert {k: ops[ids["thirds"]][k] for k in METRICS[:2]} == {
        "messages-in": n, "messages-out": n // 3}
    assert ops[ids["twice"]]["messages-in"] == n // 3
    assert ops[ids["twice"]]["messages-out"] == 2 * n // 3
    assert ops[ids["tens"]]["messages-in"] == ops[ids["tens"]]["messages-out"] == 2 * n // 3
    send = next(op for op in ops if op not in ids.values())  # the send_to
    assert ops[send]["messages-in"] == ops[send]["messages-out"] == 2 * n // 3
    for op_id, m in ops.items():
        assert set(m) == set(METRICS), op_id
        assert m["handle-ns"] > 0, (op_id, m)  # every operator ran, and took time


def test_a_window_s_panes_and_late_drops_are_what_the_run_reports(spark: Any) -> None:
    """The input declares no event time, one partition feeds the window in offset order: its
    watermark moves per message, so messages behind it are late and dropped (no late_to)."""
    app = StreamApplication("late-meters")
    mem = MemorySystem()
    w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                               fold=lambda kv, n: n + 1, event_time=lambda kv: kv.value)
    (app.input(mem.input("in", partitions=2))
     .window(w, name="w")
     .map(lambda p: (p.key.key, p.message), name="n")
     .send_to(app.output(mem.output("counts"))))
    times = {0: [1, 25, 3, 4, 31, 32, 12], 1: [2, 45, 5, 50, 51]}
    data = {p: [KV(f"k{p}", t) for t in ts] for p, ts in times.items()}
    result = SparkRunner(spark).reprocess(app, {"in": data})

    ids = op_ids(app)
    window = result.operators[ids["w"]]
    late = result.late()
    assert late > 0 and result.late_counts == {ids["w"]: {"in": late}}
    assert window["late-messages-dropped"] == late
    assert "late-messages-sent" not in window  # no late_to
    panes = result.messages("counts")
    assert window["panes-emitted"] == window["messages-out"] == len(panes)
    assert window["messages-in"] == sum(len(ts) for ts in times.values())
    assert sum(c for _, c in panes) + late == window["messages-in"]
    assert result.operators[ids["n"]]["messages-in"] == len(panes)
    assert all(m["handle-ns"] > 0 for m in result.operators.values()), result.operators

    # the summary's table: a line per operator; the window's with its panes and late drops
    table = result.operator_summary()
    assert table[0].split() == ["operator", "kind", "in", "out", "ms", "panes", "late"]
    assert [row.split()[0] for row in table[1:]] == list(result.operators)
    row = next(r.split() for r in table if r.split()[0] == ids["w"])
    assert row[1:4] == ["window", f"{window['messages-in']:,}", f"{len(panes):,}"]
    assert row[5:] == [f"{len(panes):,}", f"{late:,}"]
    assert "\n".join(table) in result.summary()


def test_a_window_after_a_shuffle_with_late_to_counts_what_it_sent(spark: Any) -> None:
    app = StreamApplication("shuffled-meters", config={"job.intermediate.stream.partitions": 3})
    mem = MemorySystem()
    w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                               fold=lambda kv, n: n + 1,
                               event_time=lambda kv: kv.value["ts"])
    (app.input(mem.input("views", event_time=lambda m: m["ts"]))
     .partition_by(lambda m: m["country"], name="by-country")
     .window(w, name="w", late_to=app.output(mem.output("late")))
     .send_to(app.output(mem.output("panes"))))
    data = {p: [{"country": f"c{i % 4}", "ts": 1_700_000_000.0 + i * 1.5 + p}
                for i in range(200)] for p in range(2)}
    result = SparkRunner(spark).reprocess(app, {"views": data})

    ids = op_ids(app)
    by_country = result.operators[ids["by-country"]]
    assert by_country["messages-in"] == by_country["messages-out"] == 400
    assert by_country["handle-ns"] > 0
    window = result.operators[ids["w"]]
    assert window["messages-in"] == 400
    assert window["handle-ns"] > 0  # its runs of messages are timed too
    assert window["panes-emitted"] == len(result.messages("panes"))
    assert window["late-messages-sent"] == result.late() == len(result.messages("late")) == 0
    assert window["late-messages-dropped"] == 0
    assert sum(p.message for p in result.messages("panes")) == 400
    assert any(r.split()[0] == ids["w"] and r.endswith(" 0 sent")
               for r in result.operator_summary()), result.operator_summary()


def test_an_async_call_counts_its_outputs(spark: Any) -> None:
    app = StreamApplication("async-meters", config={"task.max.concurrency": 4})
    mem = MemorySystem()

    async def lookup(m: int) -> list[int]:
        await asyncio.sleep(0)
        return [m, m] if m % 2 else []

    (app.input(mem.input("nums")).async_flat_map(lookup, name="lookup")
     .send_to(app.output(mem.output("out"))))
    result = SparkRunner(spark).reprocess(app, {"nums": {0: list(range(40)),
                                                        1: list(range(40, 100))}})
    m = result.operators[op_ids(app)["lookup"]]
    assert m["messages-in"] == 100
    assert m["messages-out"] == len(result.messages("out")) == 100
    assert m["handle-ns"] > 0
