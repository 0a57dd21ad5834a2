"""``TestRunner.run`` runs as long as the run makes progress, and fails when it does not: a slow
async pipeline finishes whatever it takes in total, and a call that hangs fails after
``stall_timeout`` naming the operator, task, stream, partition and offset it hangs on."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from samza_dsl import StreamApplication
from samza_dsl.errors import SamzaError, TaskError
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

CALL_S = 0.01


def slow_app(hang_on: int | None = None, **config: Any) -> tuple[StreamApplication, Any]:
    """``n`` -> ``[n]`` after a 10 ms call; the call for ``hang_on`` never returns."""
    app = StreamApplication("slow", config=config)
    mem = MemorySystem()
    inp = mem.input("in")

    async def lookup(n: int) -> list[int]:
        if n == hang_on:
            await asyncio.Event().wait()  # nothing sets it
        await asyncio.sleep(CALL_S)
        return [n]

    app.input(inp).async_flat_map(lookup, name="lookup").send_to(app.output(mem.output("out")))
    return app, inp


def test_a_slow_pipeline_finishes_however_long_it_takes_in_total() -> None:
    # 300 calls of 10 ms one at a time (task.max.concurrency 1): about 3.5 s, well past the
    # stall timeout, but every call completes within it
    app, inp = slow_app()
    started = time.monotonic()
    result = TestRunner(app).add_input(inp, list(range(300))).run(stall_timeout=1.0)
    took = time.monotonic() - started
    assert sorted(result.messages("out")) == list(range(300))
    assert took > 300 * CALL_S > 1.0
    # a cap on the whole run is still there for whoever asks for one
    with pytest.raises(SamzaError, match=r"did not finish within 1.0s .*raise run\(timeout="):
        TestRunner(slow_app()[0]).add_input(inp, list(range(300))).run(timeout=1.0)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_call_that_hangs_is_named(concurrency: int) -> None:
    app, inp = slow_app(hang_on=7, **{"task.max.concurrency": concurrency})
    started = time.monotonic()
    with pytest.raises(TaskError) as info:
        TestRunner(app).add_input(inp, list(range(20))).run(stall_timeout=0.5)
    assert time.monotonic() - started < 5
    err = info.value
    assert (err.op_id, err.task, err.stream, err.partition, err.offset) == \
        ("slow-1-async_flat_map-lookup", "Partition 0", "in", 0, 7)
    msg = str(err)
    assert msg.startswith("application 'slow-1' made no progress for 0.5s: operator "
                          "'slow-1-async_flat_map-lookup' in task 'Partition 0' has not completed "
                          "the message at stream 'in' partition 0 offset 7 for "), msg
    assert "waiting in slow_app.<locals>.lookup() at " in msg
    assert "test_test_runner_stall.py:" in msg and "raise run(stall_timeout=...)" in msg


def test_stall_timeout_and_timeout_are_checked() -> None:
    app, inp = slow_app()
    with pytest.raises(ValueError, match="seconds > 0"):
        TestRunner(app).add_input(inp, [1]).run(stall_timeout=0)
