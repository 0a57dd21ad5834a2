"""Virtual tasks (docs/semantics.md rule 18): ``job.elasticity.factor`` X splits each task in X.

- **Buckets.** A message of partition ``p`` of a stream with ``P`` partitions belongs to bucket
  ``(h // P) mod X``, where ``h`` is murmur2 of its key bytes (the hash Kafka partitions by): the
  quotient is independent of the partition ``h mod P``, so every bucket of a partition gets its
  share of keys. A message without a key goes by its offset. One key is always in one bucket, so
  its order is kept.
- **Reading.** A container reads a partition once for all its virtual tasks of it
  (``BucketFan``): each task gets the batch with the other buckets' messages replaced by a
  marker, which counts as processed, so each task's checkpoint is its own (partition, bucket)
  position. Where the partition feeds an event-time window, the marker (``OtherBucket``)
  carries the message's event time (declared on the input, or traced to the task's windows and
  intermediate streams), so a virtual task's progress in a partition is the partition's
  progress: its neighbours' messages advance it too, at their own offsets, and a bucket that
  gets none of the partition's messages does not hold back the watermark. Control records (end-of-stream, watermarks) go to every task.
  The partition is read from the lowest offset any of its tasks needs; a task skips what it had
  already processed.
- **Changing X between runs** (``rescale_checkpoints``, at the start of a run): a new task
  ``b`` of X' takes the minimum of the checkpoints of the old tasks ``i`` of X whose keys it may
  hold (``i = b mod gcd(X, X')``): a split task inherits its parent's offsets, a merged task the
  minimum of its children's. At-least-once either way. State does not move between tasks, so a
  job with stores keeps its factor (an error says so).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from operators.hashing import KeyPartitioner
from runtime.engine.codec import Skipped
from runtime.engine.job import SSP, JobModel, TaskModel, task_name
from runtime.engine.origins import OriginList
from runtime.engine.records import EndOfStream, Watermark
from runtime.engine.serde_util import default_key_bytes
from runtime.engine.watermarks import event_seconds
from samza_dsl.errors import SamzaError
from samza_dsl.kv import KV
from samza_dsl.serdes import KVSerde
from samza_dsl.systems import StreamDescriptor

__all__ = ["BucketFan", "bucket_function", "fan_readers", "tasks_of", "rescale_checkpoints", "OTHER_BUCKET",
           "OtherBucket"]

#: what a virtual task gets in place of another bucket's message
OTHER_BUCKET = Skipped("another virtual task's key bucket")
_CONTROL = (EndOfStream, Watermark, Skipped)


class OtherBucket:
    """In place of another bucket's message, for a partition that feeds an event-time window:
    what the message adds to the partition's progress (``TaskClock.neighbour_time``). It counts
    as processed at its offset, and its time counts as a completed message's would."""

    __slots__ = ("time",)

    def __init__(self, time: Any) -> None:
        self.time = time

    def __repr__(self) -> str:
        return f"OtherBucket({self.time!r})"


def bucket_function(job: JobModel, stream_id: str, buckets: int
                    ) -> Callable[[Any, int], int]:
    """``bucket(message, offset)`` for a stream's messages; -1 for control records."""
    n = job.partitions[stream_id]
    descriptor = job.plan.streams[stream_id].descriptor
    serde = descriptor.serde if isinstance(descriptor, StreamDescriptor) else None
    key_bytes = serde.key_serde.serialize if isinstance(serde, KVSerde) else default_key_bytes
    partitioner = KeyPartitioner(n * buckets, key_bytes)
    table = partitioner.table
    control = _CONTROL

    def bucket(m: Any, offset: int) -> int:
        if type(m) is KV:
            k = m.key
            if k is not None:
                try:
                    return table[k] // n
                except TypeError:  # an unhashable key: not cached
                    return partitioner(k) // n
            return offset % buckets
        if type(m) in control:
            return -1
        return offset % buckets
    return bucket


class BucketFan:
    """The virtual tasks of one partition in a container, read as one: the container's consumer
    loop sees it as a task (``inbox_size``, ``paused``, ``reading``, ``done``, ``add_batch``)."""

    def __init__(self, ssp: SSP, tasks: list[Any], bucket: Callable[[Any, int], int],
                 processed: Mapping[int, int]) -> None:
        self.ssp = ssp
        self.tasks = sorted(tasks, key=lambda t: t.model.bucket)
        self.bucket = bucket
        #: bucket -> the last offset its task had processed (skipped when read again)
        self.processed = dict(processed)
        #: a message's time for the other buckets' tasks, where the partition has event time
        self.time_of = self.tasks[0].clock.neighbour_time(ssp.stream_id)

    @property
    def inbox_size(self) -> int:
        return int(max(t.inbox_size for t in self.tasks))

    @property
    def paused(self) -> bool:
        return any(t.paused for t in self.tasks)

    def pause(self) -> None:
        for t in self.tasks:  # the first of them to take from its inbox resumes the reading
            t.pause()

    def resume(self) -> None:
        for t in self.tasks:
            t.resume()

    @property
    def done(self) -> bool:
        return all(t.done for t in self.tasks)

    def reading(self, ssp: SSP) -> bool:
        return any(t.reading(ssp) and not t.done for t in self.tasks)

    def add_batch(self, ssp: SSP, first: int, payloads: list[Any]) -> None:
        bucket = self.bucket
        marks = [bucket(m, first + i) for i, m in enumerate(payloads)]
        origins = payloads.origins if isinstance(payloads, OriginList) else None
        time_of = self.time_of
        if time_of is None:
            others: Any = itertools.repeat(OTHER_BUCKET)
        else:
            others = [_other(time_of, m) if k >= 0 else None
                      for m, k in zip(payloads, marks, strict=True)]
        for t in self.tasks:
            b = t.model.bucket
            mine = [m if k == b or k < 0 else o
                    for m, k, o in zip(payloads, marks, others, strict=False)]
            done = self.processed.get(b, -1)
            if done >= first:  # already processed before a restart
                for i in range(min(done - first + 1, len(mine))):
                    if marks[i] >= 0:
                        mine[i] = OTHER_BUCKET if time_of is None else others[i]
            if origins is not None:  # the origins of this task's records only; the first
                # virtual task decides on the records that did not decode (their key unknown)
                mine = OriginList(mine, [o if k == b or k < 0 else None
                                         for o, k in zip(origins, marks, strict=True)],
                                  payloads.held if t is self.tasks[0] else None,  # type: ignore[attr-defined]
                                  payloads.names)  # type: ignore[attr-defined]
            t.add_batch(ssp, first, mine)


def _other(time_of: Callable[[Any], Any], m: Any) -> Any:
    """The marker of message ``m`` for the tasks of the other buckets."""
    try:
        t = time_of(m)
        if t is None:
            return OTHER_BUCKET
        if type(t) is not list and type(t) is not float:
            t = event_seconds(t)
    except Exception:  # the message's own task reports it
        return OTHER_BUCKET
    return OtherBucket(t)


def rescale_checkpoints(job: JobModel, previous: int, stored: Mapping[str, Mapping[SSP, int]]
                        ) -> dict[str, dict[SSP, int]]:
    """The starting checkpoints of ``job``'s tasks when the last run had ``previous`` virtual
    tasks per task: {task name: offsets}, for the tasks that get any."""
    factor = max((t.buckets for t in job.tasks), default=1)
    if previous == factor or not any(stored.values()):  # unchanged, or nothing to move
        return {}
    if job.plan.stores:
        raise SamzaError(
            f"job.elasticity.factor changed from {previous} to {factor}, but the job has stores "
            f"({', '.join(sorted(job.plan.stores))}), whose state is kept per virtual task and "
            f"does not move between them: keep job.elasticity.factor={previous}, or reset the "
            f"job's state (samza-dsl reset) to start over with {factor}")
    g = math.gcd(previous, factor)
    out: dict[str, dict[SSP, int]] = {}
    for t in job.tasks:
        sources = [stored.get(task_name(t.partition, i, previous), {})
                   for i in range(previous) if i % g == t.bucket % g]
        offsets: dict[SSP, int] = {}
        for ssp in t.ssps:
            seen = [s.get(ssp) for s in sources]
            if seen and all(o is not None for o in seen):
                offsets[ssp] = min(o for o in seen if o is not None)
        out[t.name] = offsets
    return out


def fan_readers(tasks: list[Any], job: JobModel, restored: Mapping[str, Mapping[SSP, int]]
                ) -> list[tuple[Any, SSP, int | None]]:
    """The readers of a container's tasks: ``(reader, ssp, last processed offset or None)``.
    A task reads its broadcast partitions itself; virtual tasks of one partition share a
    ``BucketFan``, which starts after the lowest checkpoint of its tasks."""
    out: list[tuple[Any, SSP, int | None]] = []
    groups: dict[SSP, list[Any]] = {}
    broadcast = {sid for sid, s in job.plan.streams.items() if s.kind == "broadcast"}
    for t in tasks:
        model: TaskModel = t.model
        for ssp in t.ssps:
            if model.buckets == 1 or ssp.stream_id in broadcast:
                out.append((t, ssp, restored[t.name].get(ssp)))
            else:
                groups.setdefault(ssp, []).append(t)
    for ssp, members in groups.items():
        starts = [restored[t.name].get(ssp) for t in members]
        start = None if any(s is None for s in starts) else min(s for s in starts if s is not None)
        done = {t.model.bucket: s for t, s in zip(members, starts, strict=True) if s is not None}
        fan = BucketFan(ssp, members, bucket_function(job, ssp.stream_id, members[0].model.buckets),
                        done)
        out.append((fan, ssp, start))
    return out


def tasks_of(reader: Any) -> list[Any]:
    """The tasks a reader of the consumer hands records to: a ``BucketFan``'s, or the task
    that is the reader itself."""
    return reader.tasks if isinstance(reader, BucketFan) else [reader]
