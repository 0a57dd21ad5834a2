"""A message whose sub-DAG is all synchronous completes inline: no asyncio Task per message."""

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


def async_app() -> tuple[StreamApplication, Any]:
    mem = MemorySystem()
    app = StreamApplication("slow")
    inp = mem.input("in", partitions=1)

    async def call(m: int) -> list[int]:
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


def test_async_messages_do_create_a_task_each() -> None:
    """The control: the counter sees per-message tasks when there are some."""
    app, inp = async_app()
    few = count_tasks_created(app, inp, list(range(10)))
    app, inp = async_app()
    many = count_tasks_created(app, inp, list(range(1000)))
    assert many - few >= 990
