"""A task held while its consumer group rebalances (``runtime.kafka.tasks``): the task stops
handing out, lets what is in flight complete, commits, and waits until the group says whether
it stays (``release``) or goes to another container (the container closes it).

``RebalanceHold`` is a part of ``runtime.engine.task.TaskInstance``: the hold's protocol
changes with the group's, not with how a task processes its messages. The task's run loop
drains and commits through ``commit_held`` while ``held`` is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["RebalanceHold"]


class RebalanceHold:
    """``hold`` and ``release`` of a task (see the module docstring)."""

    held: asyncio.Future[None] | None
    wake: asyncio.Event
    #: the task's own commit (``TaskInstance.commit``)
    commit: Callable[[], Awaitable[None]]

    def hold(self) -> asyncio.Future[None]:
        """Stop handing out, let the messages in flight complete, commit, then wait until
        ``release`` (the task's group rebalances: the task may move to another container). The
        future is done once committed."""
        if self.held is None:
            self.held = asyncio.get_running_loop().create_future()
            self.wake.set()
        return self.held

    def release(self) -> None:
        """Go on after ``hold``: the task stays with this container."""
        self.held = None
        self.wake.set()

    async def commit_held(self, held: asyncio.Future[None]) -> None:
        """The commit a hold waits for: its future fails with the commit's error, else is
        done once committed."""
        try:
            await self.commit()
        except BaseException as exc:
            if not held.done():
                held.set_exception(exc)
                held.exception()  # the task's own run raises it; retrieved here
            raise
        if not held.done():
            held.set_result(None)
