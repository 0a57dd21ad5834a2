"""Exactly once on the embedded local system (``job.processing.guarantee=exactly-once``).

A job's outputs, intermediate streams, changelogs, dead letters and checkpoints all live in one
LMDB log, so a task's commit writes them in ONE write transaction: readers (``samza-dsl dump``,
other tasks, other containers) see a task's records at the commit that covers them, or never.

- Each task writes into a producer of its own (``TaskOutputs``, as Kafka Streams' producer per
  task): its buffers are written by nothing but its commit, so a commit of one task never makes
  another task's records visible. At-least-once jobs keep the container's one producer, which
  writes after every processed batch.
- A commit (``runtime.engine.commit``) runs when none of the task's messages is in flight, so the
  buffers hold exactly the outputs of the messages its checkpoint covers.
- A record that fails to deserialize under the ``dead-letter`` policy is noted when it is read;
  its dead letter goes with the first commit whose checkpoint covers its offset.
- What a task's buffers take is encoded after each processed batch, as the log stores it, and
  waits for the commit as bytes; past ``COMMIT_BYTES`` of them the task asks for a commit
  before the commit interval.

A store flushed into its local file before a crash that lost the commit transaction is marked
uncommitted (``runtime.state.lmdb_store``): the restart rebuilds it from its changelog up to
the checkpoint, which is exactly what that changelog holds, so nothing is counted twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from runtime.engine.codec import BufferedProducer, Record
from runtime.engine.job import SSP, TaskModel
from runtime.local.log import LocalLog
from runtime.local.segments import Encoded
from samza_dsl.errors import SamzaError

__all__ = ["COMMIT_BYTES", "SEGMENT_RECORDS", "Checkpoints", "LocalTransactions", "TaskOutputs"]

#: bytes of encoded records a task holds before it asks for a commit ahead of
#: ``task.commit.ms`` (a commit flushes the task's stores: fewer, larger ones cost less)
COMMIT_BYTES = 32 << 20
#: the most records of one segment of the log a task writes: a reader decodes a segment whole
SEGMENT_RECORDS = 8192


class Checkpoints(Protocol):
    """The checkpoints of a job in a local log (``runtime.local.state.LocalCheckpoints``)."""

    log: LocalLog

    def writer(self, task_name: str, offsets: Mapping[SSP, int]
               ) -> Callable[[Mapping[str, int]], dict[str, bytes]]: ...


class TaskOutputs(BufferedProducer):
    """One task's producer under exactly-once: a buffer per partition of each stream of the
    container's producer, written to the log only by the task's commit
    (``LocalTransactions.commit``). What the buffers take is encoded as the log stores it after
    each processed batch (``signal``), so it waits for the commit in compact bytes, and the
    records' objects are freed as the container's producer frees them."""

    def __init__(self, shared: BufferedProducer, log: LocalLog, task: Any) -> None:
        super().__init__(shared.generation)
        self.serve(shared)
        self.log = log
        self.task = task
        #: the task's input partitions: a dead letter of one waits for the checkpoint to cover it
        self.inputs = frozenset(task.model.ssps)
        #: dead letters not committed yet: (partition read, offset, record)
        self.dead: list[tuple[SSP, int, Record]] = []
        #: the records taken from the buffers since the last commit, encoded, and their bytes
        self.encoded: list[Encoded] = []
        self.encoded_bytes = 0
        self._all = [(sid, p, buf) for sid, parts in self._bufs.items()
                     for p, buf in enumerate(parts)]

    def signal(self) -> None:
        """Encode what the buffers took; nothing is written before the commit, and much
        waiting asks for one."""
        self._encode()
        if self.encoded_bytes >= COMMIT_BYTES:
            self.task.commit_requested = True

    def _encode(self) -> None:
        ts = int(time.time() * 1000)
        encode = self.log.encode_batch
        for sid, p, buf in self._all:
            if not buf:
                continue
            name, n = self._physical[sid], len(buf)
            for i in range(0, n, SEGMENT_RECORDS):
                for segment in encode(name, p, buf if n <= SEGMENT_RECORDS else
                                      buf[i:i + SEGMENT_RECORDS], ts):
                    self.encoded.append(segment)
                    self.encoded_bytes += len(segment[2] or b"")
            self.sends += n
            self._taken(sid, p, n)  # counted as the shared producer's at the commit
            buf.clear()

    async def flush(self) -> None:
        """Nothing: the task's records are written by its commit alone."""

    async def close(self) -> None:
        """Nothing: records not committed are dropped, as a crash would."""

    def take(self, offsets: Mapping[SSP, int], dead_stream: str) -> list[Encoded]:
        """The encoded batches a commit covering ``offsets`` writes: what the buffers took,
        and the dead letters of offsets it covers."""
        self._encode()
        batches = self.encoded
        if self.dead:
            inputs = self.inputs
            ready = [r for ssp, offset, r in self.dead
                     if ssp not in inputs or offset <= offsets.get(ssp, -1)]
            if ready:
                batches = [*batches, *self.log.encode_batch(dead_stream, 0, ready,
                                                            int(time.time() * 1000))]
                self.dead = [d for d in self.dead
                             if d[0] in inputs and d[1] > offsets.get(d[0], -1)]
        return batches

    def done(self, shared: BufferedProducer) -> None:
        """The commit wrote what ``take`` gave: count it as ``shared``'s."""
        self.encoded = []
        self.encoded_bytes = 0
        shared.sends += self.sends
        self.sends = 0
        for sid, n in self.written.items():
            shared.written[sid] = shared.written.get(sid, 0) + n
        self.written.clear()


class LocalTransactions:
    """The exactly-once commits of a container's tasks on one local log: their producers, the
    changelog buffers their stores write to, their dead letters, and each commit as one write
    transaction of the log (``runtime.engine.commit.Transactions``)."""

    def __init__(self, shared: BufferedProducer, log: LocalLog, written_out: Callable[[], None],
                 checkpoints: Checkpoints, tasks: list[TaskModel], dead_stream: str,
                 changelogs: Callable[[str], Mapping[str, tuple[str, int]]]) -> None:
        """``shared``: the container's producer (its streams, and where the records written
        are counted) writing to ``log``; ``written_out`` tells its readers of new records."""
        if checkpoints.log.path != log.path:
            raise SamzaError(
                f"job.processing.guarantee=exactly-once: the checkpoints are in the local log at "
                f"{checkpoints.log.path} (task.checkpoint.system) but the job's streams in "
                f"{log.path}; one commit is one transaction of one log: leave "
                f"task.checkpoint.system unset or name the job's own local system")
        self.shared = shared
        self.log = log
        self.written_out = written_out
        self.checkpoints = checkpoints
        self.dead_stream = dead_stream
        self.changelogs = changelogs
        self._names = {t.index: t.name for t in tasks}
        self._outputs: dict[str, TaskOutputs] = {}
        self._by_index: dict[int, TaskOutputs] = {}
        self._reader_of: dict[SSP, TaskOutputs] = {}

    def producer_for(self, task: Any) -> TaskOutputs:
        """The producer of a task of the container (``TaskEnv.task_producer``)."""
        outputs = TaskOutputs(self.shared, self.log, task)
        self._outputs[task.name] = outputs
        self._by_index[task.index] = outputs
        for ssp in sorted(outputs.inputs, key=str):
            self._reader_of.setdefault(ssp, outputs)
        return outputs

    def buffer(self, stream_id: str, partition: int) -> list[Record]:
        """A changelog partition's buffer: the task's of that index (``LogChangelog``)."""
        outputs = self._by_index.get(partition)
        if outputs is None:
            raise SamzaError(
                f"changelog {stream_id!r} partition {partition}: no task of index {partition} "
                f"({self._names.get(partition, 'unknown')}) runs in this container; under "
                f"exactly-once a changelog is written by its task's commit alone")
        return outputs.buffer(stream_id, partition)

    def dead_letter(self, ssp: SSP, offset: int, record: Record) -> bool:
        """Hold a dead letter for the commit of the task that reads ``ssp`` (or, for a
        changelog entry, the task of that partition); False when no task of the container
        takes it."""
        outputs = self._reader_of.get(ssp) or self._by_index.get(ssp.partition)
        if outputs is None:
            return False
        outputs.dead.append((ssp, offset, record))
        return True

    def commit(self, task_name: str, offsets: Mapping[SSP, int]) -> None:
        """Write the task's records and its checkpoint (``offsets``, and each store's changelog
        position after this commit's entries) in one transaction of the log."""
        outputs = self._outputs[task_name]
        batches = outputs.take(offsets, self.dead_stream)
        positions = self.changelogs(task_name)
        checkpoint = self.checkpoints.writer(task_name, offsets)
        shared, log = self.shared, self.log
        began, before = time.perf_counter_ns(), log.appended_bytes

        def meta(end: Callable[[str, int], int]) -> dict[str, bytes]:
            return checkpoint({store: end(s, p) for store, (s, p) in positions.items()})

        log.append_encoded(batches, meta=meta)
        shared.flush_ns += time.perf_counter_ns() - began
        shared.sent_bytes += log.appended_bytes - before
        outputs.done(shared)
        if batches:
            self.written_out()

