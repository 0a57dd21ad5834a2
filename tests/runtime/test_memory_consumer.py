"""The in-memory system's consumer (runtime/memory.py): a waiting poll ends when the set of
partitions to read changes (``wakeup``), as a bootstrap or side input that has caught up
changes it, rather than at the poll's timeout."""

from __future__ import annotations

import asyncio
import time

from runtime.engine.job import SSP
from runtime.memory import MemoryBroker, MemoryConsumer


def test_a_waiting_poll_ends_at_wakeup_not_at_its_timeout() -> None:
    broker = MemoryBroker()
    broker.create("clicks", 1)
    consumer = MemoryConsumer(broker)
    consumer.register("reader", SSP("clicks", 0), None)

    async def main() -> tuple[list[object], float]:
        poll = asyncio.create_task(consumer.poll(["reader"], 10, timeout=30.0))
        await asyncio.sleep(0.05)  # the poll waits: its partition is empty
        assert not poll.done()
        started = time.monotonic()
        consumer.wakeup()
        batches = await asyncio.wait_for(poll, 20.0)
        return batches, time.monotonic() - started

    batches, waited = asyncio.run(main())
    assert batches == []
    assert waited < 5.0, f"the poll ended {waited:.1f} s after wakeup"
