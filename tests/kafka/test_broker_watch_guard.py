"""``BrokerWatch.guard`` (``runtime.kafka.outage``): a guarded wait cancelled in the same turn
of the loop as its awaitable fails leaves that failure behind. It must not surface later as
asyncio's "Task exception was never retrieved": a flush of a task dropped when its member was
fenced printed a traceback so, beside the one line that says the member was fenced."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from runtime.kafka.outage import BrokerWatch


class Fails(Exception):
    pass


async def _fails_on(release: asyncio.Event) -> None:
    await release.wait()
    raise Fails("failed as the guard was cancelled")


async def _cancelled_as_it_fails() -> None:
    watch = BrokerWatch("127.0.0.1:9", 1.0)
    release = asyncio.Event()
    waiter = asyncio.ensure_future(watch.guard(_fails_on(release)))
    await asyncio.sleep(0.1)
    release.set()
    await asyncio.sleep(0)  # the awaitable fails; before the guard hears of it ...
    waiter.cancel()  # ... the guard is cancelled (its task dropped)
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.sleep(0.05)


def test_a_guard_cancelled_as_its_awaitable_fails_leaves_no_unretrieved_failure(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(_cancelled_as_it_fails())
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()], \
        [r.getMessage() for r in caplog.records]
