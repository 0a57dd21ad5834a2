"""The records of a task's hand-out (``runtime.engine.task``), named in one place:

- ``Batch``: records of one input partition as the consumer delivers them to a task's inbox
  (``runtime.engine.chooser``), from offset ``first`` on.
- ``Cursor``: where the task is handing out, shared with the batch runs its wiring builds
  (``runtime.engine.task_wiring``, ``runtime.engine.batch``): the batch, and the index after its message being
  processed.
- ``Handout``: a message's entry in the task's handout order (``TaskInstance.pending``): its
  partition and offset, whether it completed, when it went in flight, its event time, and how
  many messages went through the task before it. While it is in flight it is also what its
  asyncio task's ``SOURCE`` holds and what remote-table calls are tied to
  (``runtime.state.remote.CallTracker``).
"""

from __future__ import annotations

from typing import Any

from runtime.engine.job import SSP

__all__ = ["Batch", "Cursor", "Handout", "BATCH_BUDGET", "DOWNSTREAM_BUDGET", "BATCH_SECONDS",
           "PROBE_BUDGET", "next_budget"]


class Batch:
    """Records of ``ssp`` from offset ``first`` on (control records among them)."""

    __slots__ = ("ssp", "first", "payloads")

    def __init__(self, ssp: SSP, first: int, payloads: list[Any]) -> None:
        self.ssp = ssp
        self.first = first
        self.payloads = payloads

    def __repr__(self) -> str:
        return f"Batch({self.ssp!r}, {self.first}, {self.payloads!r})"


class Cursor:
    """The batch being handed out (None before the first) and the index after its message
    being processed (``SinkContext.source()``, reports of late messages)."""

    __slots__ = ("batch", "index")

    def __init__(self) -> None:
        self.batch: Batch | None = None
        self.index = 0


class Handout:
    """A message in the task's handout order: the checkpoint moves past ``offset`` of ``ssp``
    once it and every one before it are ``done``. ``started``: ``time.monotonic()`` when it went
    in flight (its callback timeout counts from there; 0 for one done at once); ``time``: its
    event time, which counts once it is done and first (None: none); ``went``: how many
    messages went through the task before it (for its error)."""

    __slots__ = ("ssp", "offset", "done", "started", "time", "went", "emitted")

    def __init__(self, ssp: SSP, offset: int, done: bool, started: float, time: Any,
                 went: int = 0) -> None:
        self.ssp = ssp
        self.offset = offset
        self.done = done
        self.started = started
        self.time = time
        self.went = went
        #: how many records it wrote into intermediate streams (``runtime.engine.origins``)
        self.emitted = 0

    def __repr__(self) -> str:
        return (f"Handout({self.ssp!r}, {self.offset}, done={self.done}, "
                f"started={self.started}, time={self.time!r}, went={self.went})")


# -- budgets -----------------------------------------------------------------------------------

#: how many messages one call of the task's ``_process_some`` hands out at most
BATCH_BUDGET = 2048
#: records of intermediate streams one call of ``_process_some`` may take on top of its budget:
#: a stage keeps up with the stages before it (whose outputs it reads) however unevenly their
#: keys fall into its partitions, so what waits between two stages stays about one round's worth
DOWNSTREAM_BUDGET = 8 * BATCH_BUDGET
#: about how long one call of ``_process_some`` from the task's loop may hand out for at most:
#: a task whose messages are slow gets a smaller budget (measured per call, never per message),
#: so its loop yields often enough for a stop, a rebalance or a timer to be seen while it works
#: (a batch of quick messages takes milliseconds, far below it: their budget never changes)
BATCH_SECONDS = 0.5
#: the budget of a task's first batch, which tells how long its messages take
PROBE_BUDGET = 8


def next_budget(budget: int, took: float, steady: bool = False) -> int:
    """The budget of a task's next batch, after one of ``budget`` took ``took`` s: about
    ``BATCH_SECONDS`` of work at that pace, at most ``BATCH_BUDGET`` (quick or ``steady``: always)."""
    if not steady and took > 0 and budget * BATCH_SECONDS < took * BATCH_BUDGET:
        # at this pace a full batch would take longer than BATCH_SECONDS
        return max(1, min(BATCH_BUDGET, int(budget * BATCH_SECONDS / took)))
    return BATCH_BUDGET
