"""A message whose sub-DAG is all synchronous completes inline: no asyncio Task per message. An
async message is taken on by a long-lived worker: the coroutine that completed the one before it
hands out the next (docs/architecture.md), so there is no Task per async message either."""

from __future__ import annotations

import asyncio
from typing import Any

from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.systems import MemorySystem


def count_tasks_created(app: StreamApplication, inp: Any, messages: list[Any]) -> int:
    created = 0
    original = asyncio.BaseEventLoop.create_task

    def counting(self: Any, coro: Any, **kw: Any) -> Any:
        nonlocal created
        created += 1
        return original(self, coro, **kw)

    asyncio.BaseEventLoop.create_task = counting  # type: ignore[method-assign]
    try:
        TestRunner(app).add_input(inp, messages).run()
    finally:
        asyncio.BaseEventLoop.create_task = original  # type: ignore[method-assign]
    return created


def sync_app() -> tuple[StreamApplication, Any]:
    mem = MemorySystem()
    app = StreamApplication("fast")
    inp = mem.input("in", partitions=1)
    (app.input(inp).filter(lambda m: m % 3).map(lambda m: KV(m % 7, m))
     .flat_map(lambda kv: [kv, kv]).send_to(app.output(mem.output("out"))))
    return app, inp


def async_app(concurrency: int = 1, sleep: float = 0.0) -> tuple[StreamApplication, Any]:
    mem = MemorySystem()
    app = StreamApplication("slow", config={"task.max.concurrency": concurrency})
    inp = mem.input("in", partitions=1)

    async def call(m: int) -> list[int]:
        if sleep:
            await asyncio.sleep(sleep)
        return [m]

    app.input(inp).async_flat_map(call).send_to(app.output(mem.output("out")))
    return app, inp


def test_synchronous_messages_create_no_task_each() -> None:
    app, inp = sync_app()
    few = count_tasks_created(app, inp, list(range(10)))
    app, inp = sync_app()
    many = count_tasks_created(app, inp, list(range(5000)))
    # the container's own tasks (task loops, consumer, timers) are a constant: none per message
    assert many == few


def test_async_messages_are_taken_on_by_long_lived_workers() -> None:
    """1,000 async calls, 10 at a time: a handful of Tasks (the container's own, and the
    workers the task's loop starts), not one per message; every output is there."""
    app, inp = async_app(concurrency=10, sleep=0.001)
    few = count_tasks_created(app, inp, list(range(10)))
    assert few > 0  # the counter sees the container's own tasks
    app, inp = async_app(concurrency=10, sleep=0.001)
    many = count_tasks_created(app, inp, list(range(1000)))
    assert many - few < 100


def test_async_outputs_are_all_there_in_key_order_with_workers() -> None:
    """Workers keep what the task's loop guaranteed: with ordering="key", each key's outputs in
    input order, whatever order the calls complete in."""
    mem = MemorySystem()
    app = StreamApplication("ordered", config={"task.max.concurrency": 16})
    inp = mem.input("in", partitions=1)

    async def call(kv: KV[int, int]) -> list[KV[int, int]]:
        await asyncio.sleep(0.002 * ((kv.value * 7) % 5))  # later ones often finish first
        return [kv]

    (app.input(inp).async_flat_map(call, ordering="key")
     .send_to(app.output(mem.output("out"))))
    messages = [KV(i % 4, i) for i in range(400)]
    out = TestRunner(app).add_input(inp, messages).run().messages("out")
    assert sorted(m.value for m in out) == list(range(400))
    for k in range(4):
        assert [m.value for m in out if m.key == k] == [i for i in range(400) if i % 4 == k]
