"""A task's inbox and which batch of records it hands out next: Samza's message chooser, for
bootstrap and priority inputs (docs/semantics.md, "Bootstrap and priority inputs").

The consumer delivers batches of records per input partition. The inbox keeps one FIFO of
batches per rank (``InputDescriptor.rank``: the input's ``priority``, 0 by default, above all
for a bootstrap input without one) and hands out the oldest batch of the highest rank, so when a
task has records of several inputs at hand, the input of the highest priority always goes first
(at equal ranks, in the order they came). At an equal rank, the intermediate streams the task
reads (``downstream``) go before its inputs: the messages a stage of this job already handled are
taken on before new ones are read in, so what is in flight between two stages stays small (and,
in memory, still in the CPU's caches). While a task bootstraps, only the batches of the
partitions still being bootstrapped (``only``) are handed out; the task does not even read its
other partitions then (``TaskInstance.reading``).

>>> from runtime.engine.job import SSP
>>> inbox = Chooser({"alerts": 5})
>>> inbox.append(Batch(SSP("clicks", 0), 0, ["c0", "c1"]))
>>> inbox.append(Batch(SSP("alerts", 0), 0, ["a0"]))
>>> [inbox.popleft().ssp.stream_id for _ in range(2)], inbox.popleft()
(['alerts', 'clicks'], None)
>>> inbox = Chooser({}, downstream={"by-country"})
>>> inbox.append(Batch(SSP("clicks", 0), 0, ["c0"]))
>>> inbox.append(Batch(SSP("by-country", 1), 0, ["v0"]))
>>> [inbox.popleft().ssp.stream_id for _ in range(2)]
['by-country', 'clicks']
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection, Iterator, Mapping

from runtime.engine.handout import Batch
from runtime.engine.job import SSP

__all__ = ["Chooser", "Batch"]


Rank = tuple[int, int]  # (the input's rank, 1 for an intermediate stream)
_PLAIN: Rank = (0, 0)


class Chooser:
    """Batches by rank, highest first; FIFO within a rank. ``ranks``: stream id -> rank, for
    the streams not at 0; ``downstream``: the intermediate streams, which go before the inputs
    of their rank."""

    def __init__(self, ranks: Mapping[str, int] | None = None,
                 downstream: Collection[str] = ()) -> None:
        self._ranks: dict[str, Rank] = {sid: (r, 0) for sid, r in (ranks or {}).items() if r}
        self._ranks.update({sid: (self._ranks.get(sid, _PLAIN)[0], 1) for sid in downstream})
        self._queues: dict[Rank, deque[Batch]] = {_PLAIN: deque()}
        self._order: list[Rank] = [_PLAIN]  # the ranks that have a queue, highest first
        #: while bootstrapping: the only partitions whose batches are handed out
        self.only: set[SSP] | None = None

    @property
    def ranked(self) -> bool:
        """Whether any stream has a rank of its own (else the inbox is one FIFO)."""
        return bool(self._ranks)

    def rank(self, ssp: SSP) -> Rank:
        return self._ranks.get(ssp.stream_id, _PLAIN)

    def _queue(self, ssp: SSP) -> deque[Batch]:
        r = self._ranks.get(ssp.stream_id, _PLAIN)
        q = self._queues.get(r)
        if q is None:
            q = self._queues[r] = deque()
            self._order = sorted(self._queues, reverse=True)
        return q

    def append(self, batch: Batch) -> None:
        self._queue(batch.ssp).append(batch)

    def push_front(self, batch: Batch) -> None:
        """A batch handed back (the rest of one a higher rank preempted): it goes first in its
        rank again."""
        self._queue(batch.ssp).appendleft(batch)

    def popleft(self) -> Batch | None:
        """The next batch to hand out, or None when none may go now."""
        only = self.only
        for r in self._order:
            q = self._queues[r]
            if not q:
                continue
            if only is None:
                return q.popleft()
            for i, batch in enumerate(q):
                if batch.ssp in only:
                    del q[i]
                    return batch
        return None

    def ready(self) -> bool:
        """Whether a batch may be handed out now."""
        only = self.only
        if only is None:
            return any(self._queues[r] for r in self._order)
        return any(b.ssp in only for b in self)

    def outranks(self, ssp: SSP) -> bool:
        """Whether a batch of a higher rank than ``ssp``'s waits (and may go now)."""
        mine = self.rank(ssp)
        only = self.only
        for r in self._order:
            if r <= mine:
                return False
            if any(only is None or b.ssp in only for b in self._queues[r]):
                return True
        return False

    def __bool__(self) -> bool:
        return any(self._queues[r] for r in self._order)

    def __iter__(self) -> Iterator[Batch]:
        return itertools.chain.from_iterable(self._queues[r] for r in self._order)
