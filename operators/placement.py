"""Where a join's key belongs (``task.join.partition.check``, docs/semantics.md rules 9 and 10).

A task reads one partition of each input (with ``job.elasticity.factor`` X > 1, one key bucket
of it), and a producer puts a record in partition ``murmur2(serialized key) % N`` (bucket
``(h // N) % X``: together, ``h % (N * X)`` is ``partition + N * bucket``). A join meets two
messages only in one task, and a ``join_table`` lookup finds a key only in the task whose part
of the table holds it, so a message whose join key belongs to another partition (or bucket)
than the one it was read from never meets the other side.

``KeyCheck`` is one join side's check in one task, built by the runtime (which knows the
task's partitions and the streams' key serdes) and called by the join with the key. It checks
every message of the first ``FIRST``, then one in ``EVERY``: a join on the wrong key shows in
the first few messages (all but 1 in N are misplaced), and later ones are sampled so the
per-message cost is one counter (the join keeps the countdown; the check returns the next). A
side with nothing to check (one partition and one task, a broadcast side, ``off``) gets no check
and costs nothing.
A misplaced key under ``fail`` raises ``JoinPartitionError``; under ``warn`` the first one of
the side in the task is logged, the others counted.

>>> from operators.hashing import KeyPartitioner
>>> parts = KeyPartitioner(4, str.encode)
>>> check = KeyCheck("j", "join 'j'", "left", "the fix", "fail",
...                  {"orders": (parts, 4, parts("o-1"), "orders")}, lambda: ("orders", 0, 7))
>>> check("o-1")  # where o-1 belongs: the next check is the next message
1
>>> check("o-2")
Traceback (most recent call last):
...
samza_dsl.errors.JoinPartitionError: join 'j': the left key 'o-2' belongs to partition 3 of stream 'orders' ... but the message was read from partition 2, ...
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from samza_dsl.errors import JoinPartitionError

__all__ = ["KeyCheck", "FIRST", "EVERY", "Slot"]

#: messages of each join side checked one by one in each task before sampling starts
FIRST = 1024
#: then one message in this many
EVERY = 256

#: a stream's slot in a task: (the partitioner over N * X of the stream whose placement rule
#: applies, N, this task's partition + N * bucket, that stream's id)
Slot = tuple[Callable[[Any], int], int, int, str]

_log = logging.getLogger("samza_dsl.join")


class KeyCheck:
    """One join side's placement check in one task (see the module's docstring).

    Args:
        op_id: The join's operator id.
        what: The join, as errors name it (``join 'id'``, ``join_table 'id' on table 't'``).
        side: ``left``/``right`` for a stream-stream join, ``""`` for a lookup.
        fix: What to do, as the error's last sentence.
        policy: ``fail`` or ``warn``.
        slots: Stream id -> ``Slot``, for the streams whose messages reach the side in this
            task (a broadcast stream, which every task reads whole, has none). A slot's rule is
            the stream's own, or where nothing placed the stream's messages by key (an input
            in memory), that of the streams the side meets.
        source: ``() -> (stream id, partition, offset)`` of the message being processed, or
            None; asked only where several streams reach the side.
        buckets: The task's key buckets (``job.elasticity.factor``).
    """

    __slots__ = ("op_id", "what", "side", "fix", "policy", "slots", "source", "buckets", "one",
                 "checked", "misplaced")

    def __init__(self, op_id: str, what: str, side: str, fix: str, policy: str, slots: Mapping[str, Slot],
                 source: Callable[[], tuple[str, int, int | None] | None] | None,
                 buckets: int = 1) -> None:
        self.op_id = op_id
        self.what = what
        self.side = side
        self.fix = fix
        self.policy = policy
        self.slots = dict(slots)
        self.source = source
        self.buckets = buckets
        #: the one stream reaching the side: no need to ask which it is
        self.one = next(iter(self.slots.items())) if len(self.slots) == 1 else None
        self.checked = 0
        self.misplaced = 0

    def __call__(self, key: Any) -> int:
        """Checks ``key``; returns how many messages on the next check is."""
        self.checked += 1
        after = 1 if self.checked < FIRST else EVERY
        if self.one is not None:
            slot = self.one[1]
        else:
            where = self.source() if self.source is not None else None
            found = self.slots.get(where[0]) if where is not None else None
            if found is None:
                return after  # a stream read whole by every task, or unknown
            slot = found
        partitioner, n, mine, sid = slot
        try:
            got: int | None = partitioner(key)
            why = ""
        except Exception as exc:  # the key does not serialize with the stream's key serde
            got = None
            why = f"{type(exc).__name__}: {exc}"
        if got != mine:
            self._misplaced(key, sid, n, mine, got, why)
        return after

    def _misplaced(self, key: Any, sid: str, n: int, mine: int, got: int | None,
                   why: str) -> None:
        self.misplaced += 1
        text = self.describe(key, sid, n, mine, got, why)
        if self.policy == "fail":
            raise JoinPartitionError(text, op_id=self.op_id, key=key,
                                     belongs=None if got is None else got % n,
                                     read_from=mine % n, stream=sid)
        if self.misplaced == 1:
            _log.warning("%s (task.join.partition.check=warn: logged once per join side and "
                         "task, and the job goes on)", text)

    def describe(self, key: Any, sid: str, n: int, mine: int, got: int | None,
                 why: str) -> str:
        """The one-line error for a misplaced ``key`` of stream ``sid``."""
        shown = repr(key)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        whose = f"the {self.side} key" if self.side else "the key"
        x = self.buckets
        if got is None:
            belongs = (f"does not serialize with the key serde of stream {sid!r} ({why}), so "
                       f"no producer of the stream placed a record by it")
        else:
            belongs = (f"belongs to {_slot(got, n, x)} of stream {sid!r} ({n} partition"
                       f"{'s' if n != 1 else ''}: murmur2 of the key serialized by the "
                       f"stream's key serde, as a producer places it)")
        return (f"{self.what}: {whose} {shown} {belongs}, but the message was read from "
                f"{_slot(mine, n, x)}, where it {self._consequence()}. {self.fix} (or set "
                f"task.join.partition.check=warn to log this and go on, or off)")

    def _consequence(self) -> str:
        if self.side:
            other = "right" if self.side == "left" else "left"
            return f"never meets the {other} side's messages of that key"
        return "is looked up in this task's part of the table, which lacks its key"


def _slot(h: int, n: int, buckets: int) -> str:
    if buckets == 1:
        return f"partition {h % n}"
    return f"partition {h % n} key bucket {h // n} of {buckets} (job.elasticity.factor)"
