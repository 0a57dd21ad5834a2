"""Streams whose partition count changes while a job runs (docs/kafka.md, "Partitions added
to a topic").

A job's plan fixes the partition count of each of its streams when it starts: a task reads and
writes the same partition number of each of its streams, and its consumer reads the partitions
the plan names, no others. Partitions added to an input later would never be read, and keys
would go to other partitions than the tasks' state was built from. So, as Samza's
``StreamPartitionCountMonitor`` and Kafka Streams do, a running job reads its streams' partition
counts now and again (its system says how: ``runtime.kafka.partition_watch`` for topics, the
log's own metadata on the local system), and stops, after committing what it processed, once one
differs from its plan (``Container.stop_with``): the error names each changed stream, both counts
and what to do. It does not re-plan itself: a re-plan moves keys between tasks, which only a
new run can do safely.

>>> PlannedStream("orders", 4, "input stream 'orders'", input=True).changed(8)
"input stream 'orders' (topic 'orders') has 8 partitions now, not the 4 the job was planned with: records in partitions 4 to 7 would never be read"
>>> PlannedStream("job-counts-changelog", 4, "the changelog of store 'counts'").changed(6)
"the changelog of store 'counts' (topic 'job-counts-changelog') has 6 partitions now, not the 4 the job was planned with"
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from samza_dsl.errors import SamzaError

__all__ = ["PartitionCountChanged", "PartitionWatch", "PlannedStream", "changed_error",
           "planned_streams"]

#: where the docs say what to do
DOCS = "'Partitions added to a topic' in docs/kafka.md"


class PartitionCountChanged(SamzaError):
    """A stream of the job has another partition count than its plan fixed."""


@dataclass(frozen=True)
class PlannedStream:
    """A stream of the job: its physical name, the partition count the plan fixed, what it is
    to the job (``input stream 'orders'``, ``the changelog of store 'counts'``...)."""

    name: str
    partitions: int
    what: str
    #: an input: records others write to partitions added to it are never read
    input: bool = False

    def changed(self, now: int, noun: str = "topic") -> str:
        """What a count of ``now`` partitions means, in a phrase (``noun``: what the system
        calls a stream: a Kafka topic, a stream of the local log)."""
        text = (f"{self.what} ({noun} {self.name!r}) has {now} partitions now, not the "
                f"{self.partitions} the job was planned with")
        if self.input and now > self.partitions:
            first, last = self.partitions, now - 1
            parts = f"partition {first}" if first == last else f"partitions {first} to {last}"
            text += f": records in {parts} would never be read"
        return text


def planned_streams(counts: Iterable[tuple[str, int]], plan: Any, physical: Mapping[str, str],
                    changelogs: Mapping[str, str] | None = None,
                    others: Mapping[str, str] | None = None) -> list[PlannedStream]:
    """The job's streams (``counts``: physical name and planned count), each said as what it is
    to the job: a stream of ``plan`` (``physical``: stream id -> physical name), the changelog
    of a store (``changelogs``: store -> physical name), or as ``others`` says (physical name
    -> what it is)."""
    said = {name: (what, False) for name, what in (others or {}).items()}
    said |= {name: (f"the changelog of store {store!r}", False)
             for store, name in (changelogs or {}).items()}
    said |= {physical[sid]: (f"{s.kind} stream {sid!r}", s.kind == "input")
             for sid, s in plan.streams.items() if sid in physical}
    return [PlannedStream(name, n, *said.get(name, ("a stream of the job's own", False)))
            for name, n in counts]


def changed_error(job_name: str, changes: list[str], reset: str) -> PartitionCountChanged:
    """The job's one line once ``changes`` (``PlannedStream.changed`` phrases) were seen."""
    return PartitionCountChanged(
        f"job {job_name!r}: {'; '.join(changes)}. A running job reads and writes only the "
        f"partitions its plan fixed at its start, so it stopped, after committing what it had "
        f"processed. Run it again to plan for the new count: where the job's state, "
        f"intermediate streams or outputs have the old count, that run refuses to start, and "
        f"`{reset}` starts the job over (its state is rebuilt from its inputs; see {DOCS})")


class PartitionWatch:
    """Every ``interval`` seconds, the partition counts of ``streams`` as ``read`` gives them
    (physical name -> count, None for a stream gone, which other checks report; ``read`` gives
    None when it cannot read them now, e.g. brokers away: the next turn tries again);
    ``on_change`` gets the job's error once one differs from its plan, and the watch ends."""

    def __init__(self, read: Callable[[], Awaitable[Mapping[str, int | None] | None]],
                 streams: Iterable[PlannedStream], interval: float, *, job_name: str,
                 reset: str, on_change: Callable[[SamzaError], None],
                 noun: str = "topic") -> None:
        self.read = read
        self.streams = {s.name: s for s in streams}
        self.interval = interval
        self.job_name = job_name
        self.reset = reset
        self.on_change = on_change
        self.noun = noun
        #: the job's error, once a count changed
        self.error: PartitionCountChanged | None = None

    async def run(self) -> None:
        while self.error is None:
            await asyncio.sleep(self.interval)
            await self.check()

    async def check(self) -> PartitionCountChanged | None:
        """The counts now; the error (also given to ``on_change``) if one changed."""
        found = await self.read()
        return None if found is None else self.seen(found)

    def seen(self, found: Mapping[str, int | None]) -> PartitionCountChanged | None:
        """The counts ``found`` (physical name -> count, None for a stream gone), read here or
        by another check of the job's streams; the error (also given to ``on_change``) if one
        differs from the plan."""
        changes = [s.changed(n, self.noun) for name, s in self.streams.items()
                   if (n := found.get(name)) is not None and n != s.partitions]
        if not changes or self.error is not None:
            return self.error
        self.error = changed_error(self.job_name, changes, self.reset)
        self.on_change(self.error)
        return self.error
