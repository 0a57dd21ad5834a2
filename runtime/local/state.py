"""A job's checkpoints and stores on the embedded local system: checkpoints in the local log's
metadata (``LocalCheckpoints``), each store's changelog partition in the log
(``LogChangelog``), and the stores' backend that compacts those changelogs and trims the
streams the job read once a checkpoint is written (``LocalState``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import msgspec

from runtime.engine import checkpoints
from runtime.engine.codec import Record
from runtime.engine.job import SSP, JobModel, TaskModel
from runtime.host.metrics import Metrics
from runtime.local.clients import LocalProducer
from runtime.local.compaction import DRAIN_SECONDS, ChangelogCompactor
from runtime.local.exactly_once import LocalTransactions
from runtime.local.log import LocalLog
from runtime.local.retention import LogTrimmer
from runtime.local.segments import CorruptSegmentError
from runtime.state.backend import StoreBackend
from runtime.state.changelog import Changelog
from runtime.state.ttl import processing_ttl_ms
from samza_dsl.errors import SamzaError, SerdeError
from samza_dsl.jobconfig import JobConfig

__all__ = ["LocalCheckpoints", "LogChangelog", "LocalState"]


# -- checkpoints --------------------------------------------------------------------------------

class LocalCheckpoints:
    """Checkpoints in the log's metadata: one atomic write per task and commit."""

    def __init__(self, log: LocalLog, job_name: str) -> None:
        self.log = log
        self.job_name = job_name
        #: per task, its event-time progress as of the checkpoint being written (``Committer``)
        self.times: dict[str, Any] = {}
        #: per task, its sinks' record for the checkpoint being written (``runtime.engine.sinks``)
        self.sinks: dict[str, Any] = {}
        #: per task, what it applied of its intermediate streams (``runtime.engine.origins``)
        self.applied: dict[str, Any] = {}

    def _key(self, task_name: str) -> str:
        return f"checkpoint/{self.job_name}/{task_name}"

    def _read(self, task_name: str) -> dict[str, Any]:
        raw = self.log.get_meta(self._key(task_name))
        if raw is None:
            return {}
        try:
            return checkpoints.decode(raw)
        except msgspec.DecodeError as exc:
            raise SamzaError(f"the checkpoint of task {task_name!r} of job {self.job_name!r} in "
                             f"{self.log.path} is unreadable ({exc}); reset the job "
                             f"(samza-dsl reset) to start over") from exc

    def read(self, task_name: str) -> dict[SSP, int]:
        return checkpoints.offsets_of(self._read(task_name))

    def read_changelogs(self, task_name: str) -> dict[str, int]:
        return checkpoints.changelogs_of(self._read(task_name))

    def read_times(self, task_name: str) -> Any:
        return checkpoints.times_of(self._read(task_name))

    def read_sinks(self, task_name: str) -> dict[str, Any]:
        return checkpoints.sinks_of(self._read(task_name))

    def read_applied(self, task_name: str) -> dict[str, Any]:
        return checkpoints.applied_of(self._read(task_name))

    def written(self, task_name: str) -> float | None:
        """When the task's checkpoint was written (seconds since the epoch), as status reads it."""
        return checkpoints.written_of(self._read(task_name))

    def write(self, task_name: str, offsets: Mapping[SSP, int],
              changelogs: Mapping[str, int] | None = None, *, replace: bool = False) -> None:
        """``replace``: drop what the task's checkpoint held before."""
        data = checkpoints.merge({} if replace else self._read(task_name), offsets, changelogs,
                                 times=self.times.get(task_name),
                                 sinks=self.sinks.get(task_name),
                                 applied=self.applied.get(task_name))
        self.log.put_meta(self._key(task_name), checkpoints.encode(data))

    def writer(self, task_name: str, offsets: Mapping[SSP, int]
               ) -> Callable[[Mapping[str, int]], dict[str, bytes]]:
        """The metadata of the task's next checkpoint, given the changelog positions: for an
        exactly-once commit, which learns them inside its transaction (the task's checkpoint
        has no other writer while it runs, so the old one is read before)."""
        old, key, times = self._read(task_name), self._key(task_name), self.times.get(task_name)
        sinks = self.sinks.get(task_name)

        def record(changelogs: Mapping[str, int]) -> dict[str, bytes]:
            return {key: checkpoints.encode(checkpoints.merge(old, offsets, changelogs,
                                                              times=times, sinks=sinks))}
        return record

    def records(self) -> dict[str, dict[str, Any]]:
        """Every task's whole checkpoint (offsets, changelogs, when it was written)."""
        prefix = f"checkpoint/{self.job_name}/"
        return {k[len(prefix):]: self._read(k[len(prefix):]) for k in self.log.meta_items(prefix)}

    def tasks(self) -> dict[str, dict[SSP, int]]:
        prefix = f"checkpoint/{self.job_name}/"
        return {k[len(prefix):]: self.read(k[len(prefix):])
                for k in self.log.meta_items(prefix)}


# -- state --------------------------------------------------------------------------------------

class LogChangelog:
    """A store's changelog partition in the local log. Appends go through the producer's
    buffer, so they become durable with the producer's flush at commit."""

    def __init__(self, log: LocalLog, producer: LocalProducer | LocalTransactions,
                 stream_id: str, partition: int) -> None:
        self.log = log
        self.stream_id = stream_id
        self.partition = partition
        self._buf = producer.buffer(stream_id, partition)

    def append(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        self._buf.extend((k, v, None) for k, v in entries)

    def end_offset(self) -> int:
        return self.log.end_offset(self.stream_id, self.partition)

    def read(self, start: int, end: int
             ) -> Iterator[tuple[int | Sequence[int], list[tuple[bytes, bytes | None]]]]:
        """Batches of ``(the first offset, entries)``, or ``(each entry's offset, entries)``
        where compaction left gaps."""
        pos = start
        while pos < end:
            try:
                offsets, records = self.log.read_with_offsets(self.stream_id, self.partition,
                                                              pos, min(65536, end - pos))
            except CorruptSegmentError as e:
                raise SamzaError(
                    f"cannot restore a store from its changelog: {e}. A store is not restored "
                    f"from part of its changelog (its state could not be trusted): restore the "
                    f"log directory from another copy, or start the job over with `samza-dsl "
                    f"reset` (its inputs stay; its stores are rebuilt from them)") from e
            if not records:
                return
            if offsets[-1] >= end:  # past `end` in a compacted part
                n = bisect_left(offsets, end)
                offsets, records = offsets[:n], records[:n]
                if not records:
                    return
            entries = [(k, v) for k, v, _ in records]
            yield (offsets.start if type(offsets) is range else offsets), entries  # type: ignore[misc]
            pos = offsets[-1] + 1


class LocalState(StoreBackend):
    """The stores of a job on the local log: its changelogs in the log are compacted below
    their checkpoints after commits, and the streams it read are trimmed."""

    def __init__(self, root: str, job: JobModel, config: JobConfig,
                 changelogs: Mapping[str, Callable[[int], Changelog]],
                 metrics: Metrics,
                 dead_letter: Callable[[SSP, int, Record, SerdeError], None] | None = None,
                 checkpointed: Callable[[str], Mapping[str, int]] | None = None) -> None:
        super().__init__(root, job, config, changelogs, metrics, dead_letter)
        #: compacts the changelogs in the local log below their checkpoints, after commits
        self.compactor = ChangelogCompactor(
            lambda key: (checkpointed(key[0]).get(key[1]) if checkpointed is not None
                         else None))
        #: trims intermediate streams and applies retention, after commits
        self.trimmer: LogTrimmer | None = None

    def changelog_opened(self, task: TaskModel, store_name: str, changelog: Changelog) -> None:
        store = self.config.store(store_name)
        if isinstance(changelog, LogChangelog) and store.changelog_compaction:
            self.compactor.add(
                (task.name, store_name), changelog.log, changelog.stream_id,
                changelog.partition, store.changelog_delete_retention_ms,
                processing_ttl_ms(self.job.plan, store_name))

    def changelog_partitions(self, task_name: str) -> dict[str, tuple[str, int]]:
        """Per store of the task with a changelog in the log: its (stream, partition)."""
        return {store: (c.stream_id, c.partition)
                for (task, store), c in self._changelog_of.items()
                if task == task_name and isinstance(c, LogChangelog)}

    def checkpointed(self, task_name: str) -> None:
        """The task's checkpoint is written: its changelogs may be compacted below it, and the
        streams it read trimmed."""
        self.compactor.request()
        if self.trimmer is not None:
            self.trimmer.maybe_run()

    def close(self) -> None:
        if self.trimmer is not None and self.trimmer.targets:
            self.trimmer.run()
        self.compactor.close(drain_seconds=DRAIN_SECONDS)
        super().close()
