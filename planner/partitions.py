"""Partition counts of intermediate streams (docs/semantics.md rule 2).

1. Streams that meet at a join, including the virtual edge ``send_to(table)`` -> ``join_table(table)``,
   must be co-partitioned: a known count in a joined set goes to its unknown members, repeatedly
   until nothing changes (an input of unknown count passes a count on, but stays unknown).
2. Else ``job.intermediate.stream.partitions``.
3. Else the max of the partitions of all input and output streams (1 when none is known).

Broadcast streams have exactly 1 partition and take no part in co-partitioning. A joined set whose
known members still differ is a PlanError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from samza_dsl.errors import PlanError

__all__ = ["JoinedSet", "infer_partitions"]


@dataclass(frozen=True)
class JoinedSet:
    """Streams that must have one partition count, because of ``reason`` (a join op id, or a table)."""

    reason: str
    streams: tuple[str, ...]


def infer_partitions(known: Mapping[str, int | None], intermediates: Mapping[str, bool],
                     joined: list[JoinedSet], default: int | None,
                     input_output: list[str]) -> dict[str, int | None]:
    """Counts for every stream. ``known`` has inputs/outputs (None when unknown) and any fixed
    intermediate counts; ``intermediates`` maps intermediate id -> is_broadcast."""
    counts: dict[str, int | None] = dict(known)
    for sid, broadcast in intermediates.items():
        if broadcast:
            if counts.get(sid) not in (None, 1):
                raise PlanError(f"broadcast stream {sid!r} has exactly 1 partition, not "
                                f"{counts[sid]}")
            counts[sid] = 1
        else:
            counts.setdefault(sid, None)
    sets = [JoinedSet(js.reason, tuple(s for s in js.streams if not intermediates.get(s, False)))
            for js in joined]

    # Unknown inputs take part too: a stream joined with a 4-partition stream must have 4, so
    # the count flows through it to the intermediates it is joined with. Only intermediates keep
    # an inferred count; an input's count stays unknown until its system tells it at run time.
    work = dict(counts)

    def propagate() -> None:
        changed = True
        while changed:
            changed = False
            for js in sets:
                first = next((work[s] for s in js.streams if work.get(s) is not None), None)
                if first is None:
                    continue
                for s in js.streams:
                    if work.get(s) is None:
                        work[s] = first
                        changed = True

    propagate()
    if any(work[s] is None for s in intermediates):
        if default is None:
            sizes = [counts[s] for s in input_output if counts.get(s) is not None]
            default = max(sizes) if sizes else 1  # type: ignore[type-var]
        for s in intermediates:
            if work[s] is None:
                work[s] = default
        propagate()

    for js in sets:
        members = [s for s in js.streams if work.get(s) is not None]
        if not members:
            continue
        expected = work[members[0]]
        for s in members[1:]:
            if work[s] != expected:
                inferred = [m for m in (members[0], s) if counts.get(m) is None]
                note = (f"; the count of {', '.join(map(repr, inferred))} is inferred from its "
                        f"other joins" if inferred else "")
                raise PlanError(f"Unable to resolve input partitions of stream {s!r} for join "
                                f"{js.reason!r}. Expected {expected}, actual {work[s]} "
                                f"(stream {members[0]!r} has {expected}{note}). Streams that "
                                f"meet at a join must have the same partition count: repartition "
                                f"one side with partition_by")
    for s in intermediates:
        counts[s] = work[s]
    return counts
