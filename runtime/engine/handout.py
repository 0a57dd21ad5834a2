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

__all__ = ["Batch", "Cursor", "Handout"]


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
