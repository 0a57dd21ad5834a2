"""A Spark task's async calls go on as a streaming task's (``runtime.engine.dag.counted`` and
``continue_outputs``): counted in flight while they run, their outputs released in input
order, stamped with the record that made the call; a call that fails names its record. No
Spark session: the executor runs alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.memory import resolve_partitions
from runtime.spark.executor import PassExecutor, PassFailure
from runtime.spark.meter import IN, OUT
from samza_dsl import StreamApplication
from samza_dsl.systems import MemorySystem


def _executor(fn: Any) -> tuple[PassExecutor, str]:
    app = StreamApplication("calls", config={"task.max.concurrency": 4})
    mem = MemorySystem()
    app.input(mem.input("in")).async_flat_map(fn, name="call").send_to(
        app.output(mem.output("out")))
    plan = app.plan(partitions={"in": 1})
    (stage,) = plan.stages
    ex = PassExecutor(plan, [stage.stage_id], 0, resolve_partitions(plan), plan.config)
    (op_id,) = [o for o in ex.operators if o.endswith("-call")]
    return ex, op_id


def _records(ms: list[float]) -> list[tuple[Any, ...]]:
    return [("in", 1000 * (off + 1), 0, off, 1000 * (off + 1) + 7, m) for off, m in enumerate(ms)]


def test_calls_are_counted_in_flight_and_released_in_input_order() -> None:
    async def call(seconds: float) -> list[Any]:
        await asyncio.sleep(seconds)
        return [seconds, -seconds]

    ex, op_id = _executor(call)
    # the 4th call fills the queue: the first is released, the 2nd to 4th run on
    out = ex.feed(_records([0.01, 0.8, 0.7, 0.6]))
    assert [(rec[1], rec[4], rec[5]) for _, rec in out] == [(1000, 1007, 0.01),
                                                            (1000, 1007, -0.01)]
    assert ex.op_meters[op_id].in_flight == 3
    out = ex.finish()
    assert [(rec[1], rec[5]) for _, rec in out] == [
        (2000, 0.8), (2000, -0.8), (3000, 0.7), (3000, -0.7), (4000, 0.6), (4000, -0.6)]
    assert ex.op_meters[op_id].in_flight == 0
    assert ex.meters[op_id][IN] == 4 and ex.meters[op_id][OUT] == 8


def test_a_call_that_fails_names_its_record() -> None:
    async def call(m: int) -> list[Any]:
        await asyncio.sleep(0)
        return [10 // m]

    ex, op_id = _executor(call)
    with pytest.raises(PassFailure) as info:
        ex.run(_records([1, 2, 0, 4]))
    msg = str(info.value)
    assert f"operator {op_id!r}" in msg and "stream 'in'" in msg, msg
    assert "partition 0 offset 2" in msg and "ZeroDivisionError" in msg, msg
