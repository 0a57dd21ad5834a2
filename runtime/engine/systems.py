"""What a system gives a container, and which systems there are.

A system (``samza_dsl.systems``: a descriptor's ``factory``) serves a job's streams with a
``Consumer`` and a ``Producer``, keeps its checkpoints in a ``CheckpointStore`` and its tasks'
stores through a ``StateBackend``. ``SYSTEMS`` maps each factory to the job that runs an
application on it; ``job_system(app)`` picks the one an application's streams name.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from runtime.engine.job import SSP, TaskModel
from samza_dsl.errors import SamzaError

__all__ = ["Consumer", "RebalancingConsumer", "Producer", "RecordSink", "StreamSink", "CheckpointStore", "StateBackend", "TaskLifecycle", "StandbyReads", "JobSystem", "NeverRan", "SystemKind",
           "SYSTEMS", "job_system"]

_T = TypeVar("_T")


class Consumer(Protocol):
    """Reads a container's input partitions for their readers (``key``: a task, or a
    ``BucketFan`` of a partition's virtual tasks). A consumer subclasses this Protocol, which
    gives the defaults of what one may leave out (``codecs``)."""

    #: stream id -> the ``runtime.engine.codec.StreamCodec`` that decodes its records, where the
    #: system stores streams as records (the local log, Kafka; in memory, the streams declared
    #: with a serde)
    codecs: Mapping[str, Any] = {}

    def register(self, key: Any, ssp: SSP, next_offset: int | None) -> None: ...
    async def poll(self, keys: list[Any], max_per_key: int, timeout: float | None = None,
                   limits: Mapping[Any, int] | None = None,
                   ) -> list[tuple[Any, int, list[Any]]]: ...
    def wakeup(self) -> None: ...
    async def close(self) -> None: ...
    def waiting_for(self, key: Any) -> str:
        """Where reader ``key`` stands, for a run that has waited long: the offset it reads
        next, where its partition ends, and what holds it back, as the system knows it."""
        ...
    def behind(self, key: Any) -> bool:
        """Whether reader ``key``'s partition holds records it has not handed out yet, as the
        system knows it (True until it knows): such a partition is never idle
        (``idle_timeout``), however long its records take to come."""
        ...

    async def read_bounds(self, keys: list[Any]) -> Mapping[Any, tuple[int, int]]:
        """Per reader key: the next offset it reads, and its partition's end offset now (a
        bootstrap input is read to that end first)."""
        ...

    def progress(self) -> Sequence[tuple[SSP, int | None, int | None]]:
        """Per partition read: where reading began and where the partition ends, as the system
        knows them (None: not yet known); none by default."""
        return []


class RebalancingConsumer(Consumer, Protocol):
    """A consumer whose readers come and go while it runs: the tasks of a container whose
    tasks move between containers (a member of a Kafka consumer group)."""

    async def add(self, entries: list[tuple[Any, SSP, int | None]]) -> None:
        """Readers that come while it runs (each as ``register``'s arguments: key, partition,
        the next offset to read or None for the input's ``offset_default``)."""
        ...

    def remove(self, keys: Iterable[Any]) -> None:
        """Readers that left: their partitions are read no more (unless others read them)."""
        ...


@dataclass(frozen=True, slots=True)
class StreamSink:
    """Where a task's fused terminals put the messages of one stream, with no call of the
    producer in between: ``append[p](r)`` adds ``r`` to partition ``p``'s buffer.

    A producer of records gives ``encode`` (any message -> a record, raising the serde's own
    error) and, where the stream's serdes have them, the fast serializers ``key`` and ``value``
    (``(key(k), value(v), None)`` is the record of ``KV(k, v)`` with neither None; they may
    raise anything on bad input). A producer that keeps messages as they are (in memory) gives
    ``encode=None``: messages are appended themselves."""

    append: Sequence[Callable[[Any], None]]
    key: Callable[[Any], bytes] | None = None
    value: Callable[[Any], bytes] | None = None
    encode: Callable[[Any], Any] | None = None
    #: where the appends read the message being processed (records that carry their origin,
    #: ``runtime.engine.origins``): a loop over a batch sets its ``index`` as it goes
    cursor: Any = None
    #: with ``cursor``: ``prefix(ssp)``, the start of the origin header of a message of ``ssp``
    #: that the record's offset and index 0 complete (None: the records need more), and the
    #: appends that take records with their headers as they are
    prefix: Callable[[Any], bytes | None] | None = None
    plain: Sequence[Callable[[Any], None]] | None = None
    #: with ``cursor``, where the log stores origins in their compact form: ``origin_id(ssp)``,
    #: which a record's offset completes (``runtime.engine.origins.OFFSET_BITS``), or None
    origin_id: Callable[[Any], int | None] | None = None


class RecordSink(Protocol):
    def record_sink(self, stream_id: str) -> StreamSink | None:
        """The sink of ``stream_id``; None: its messages go through ``sender`` only."""
        ...


@dataclass(frozen=True, slots=True)
class ProducerCounts:
    """What a producer of records wrote out: records, bytes, the nanoseconds its flushes took,
    and messages per stream (control records left out)."""

    sends: int
    sent_bytes: int
    flush_ns: int
    written: Mapping[str, int]


class Producer(RecordSink, Protocol):
    def counts(self) -> ProducerCounts | None:
        """What it wrote out so far; None for a producer that counts nothing (in memory)."""
        ...

    def send(self, stream_id: str, partition: int, payload: Any) -> None: ...
    def sender(self, stream_id: str) -> Callable[[int, Any], None]: ...
    def signal(self) -> None: ...
    async def flush(self) -> None: ...
    async def close(self) -> None: ...


class CheckpointStore(Protocol):
    """A task's checkpoint: the last processed offset per input partition, and the changelog
    offset of each of its stores at that point.

    Besides, it keeps with each checkpoint the task's event-time progress (``times``, set
    before a write) and its sinks' positions (``sinks``). What a store may not keep is
    declared here with the defaults of one that keeps nothing more (a store subclasses this
    Protocol to take them): ``read_times``, ``read_sinks`` and when the checkpoint was written
    (``written``)."""

    #: per task, its event-time progress as of the checkpoint being written (``Committer``)
    times: dict[str, Any]
    #: per task, its sinks' record for the checkpoint being written (``runtime.engine.sinks``)
    sinks: dict[str, Any]
    #: per task, what it applied of its intermediate streams' records (``runtime.engine.origins``)
    applied: dict[str, Any]

    def read(self, task_name: str) -> dict[SSP, int]: ...
    def read_changelogs(self, task_name: str) -> dict[str, int]: ...
    def write(self, task_name: str, offsets: Mapping[SSP, int],
              changelogs: Mapping[str, int] | None = None) -> Awaitable[None] | None: ...

    def read_times(self, task_name: str) -> Any:
        """The task's event-time progress in its checkpoint; None: none kept."""
        return None

    def read_sinks(self, task_name: str) -> dict[str, Any]:
        """The task's sinks' record in its checkpoint (empty: none)."""
        return {}

    def read_applied(self, task_name: str) -> dict[str, Any]:
        """What the task applied of its intermediate streams' records as of its checkpoint
        (``runtime.engine.origins``; empty: none kept)."""
        return {}

    def written(self, task_name: str) -> float | None:
        """When the task's checkpoint was written (epoch seconds; None: never); a store that
        does not keep it says now."""
        return time.time()


class StateBackend(Protocol):
    """Makes the stores of tasks and commits them (docs/semantics.md rules 16-17)."""

    def open(self, task: TaskModel, store_name: str, checkpointed: int | None) -> Any: ...
    def flush(self, task_name: str) -> None: ...
    def committed(self, task_name: str) -> dict[str, int]: ...
    def close(self) -> None: ...

    def samples(self) -> list[Any]:
        """Metrics of its stores (``runtime.host.metrics.Sample``); none by default."""
        return []

    def checkpointed(self, task_name: str) -> None:
        """The task's checkpoint is written (a hook: the local system compacts its changelogs
        and trims its intermediate streams below it)."""
        return None


class StandbyReads(Protocol):
    """A member's standby replicas as an interactive query reads them (``runtime.kafka.standby``,
    ``runtime.engine.query_read``)."""

    def holding(self, store: str) -> list[str]:
        """The standby tasks whose replica of ``store`` is open here now."""
        ...

    def read(self, task: str, store: str, fn: Callable[[Any], _T]
             ) -> tuple[_T, int | None] | None:
        """``fn(replica)`` and the changelog offset of the task's last checkpoint seen (None:
        none yet); None when no such replica is open."""
        ...


class TaskLifecycle(Protocol):
    """Which tasks a container runs, where they come and go while it runs (Kafka Streams'
    ``TaskManager`` shape: a member of a Kafka consumer group, ``runtime.kafka.tasks``). The
    container holds it (``Container.lifecycle``) and runs in its place the tasks it was built
    with; the lifecycle hands tasks in and out through the container's ``build_task``,
    ``attach``, ``detach`` and ``read_on``."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Begin taking tasks (the container's helpers run already)."""

    async def serve(self) -> None:
        """Until stopped (every task committed) or failed."""

    async def leave(self) -> list[asyncio.Task[None]]:
        """Take no task more and settle what is under way; the runs of the tasks it runs now,
        which the container closes with the rest."""
        ...

    def stop_requested(self) -> None:
        """The container was asked to stop (``request_stop``)."""

    def fail(self, exc: BaseException) -> None:
        """The container stops with ``exc``, whatever tasks it has now."""

    def health_state(self) -> tuple[str, bool, int]:
        """What the health endpoint says (``Container.health_state``)."""
        ...

    def status(self) -> dict[str, Any]:
        """What it adds to the container's status."""
        ...

    @property
    def standby(self) -> StandbyReads | None:
        """The replicas of the member's standby tasks, if it keeps any."""
        ...


class NeverRan(SamzaError):
    """The job has no state where a command looked: nothing to dump, compact or reset."""


class JobSystem(Protocol):
    """What the runner and the command line do with a job on one kind of system, besides what
    a running container asks of it (the protocols above). A system whose streams outlive a run
    (the local log, Kafka) implements it in its own room; the runner and ``samza-dsl`` reach it
    through ``SYSTEMS`` only, so adding a system touches its room and one line there.

    The job ``create`` and ``prepare`` give has ``plan``, ``container`` (after ``create``),
    ``codecs`` (stream id -> ``StreamCodec``), ``lock``, and ``release_lock``, ``close``,
    ``tail``, ``messages`` and ``partitions`` for a run's outputs. The commands' methods take
    ``app_ref``, the application as the user named it, for the commands their errors suggest."""

    #: its name in errors ("the embedded local log", "Kafka")
    label: str
    #: whether the job's metrics snapshots stream is where this machine reads it (the job page
    #: of a run of several containers; ``open_job``)
    metrics_in_log: bool
    #: what ``dump --uncommitted`` shows on it, said on standard error first
    uncommitted_note: str

    async def create(self, app: Any, config: Any, metrics: Any, *, follow: bool,
                     inputs: Mapping[str, Any]) -> Any:
        """The job of one container, built and ready to run (its lock held)."""
        ...

    async def prepare(self, app: Any, config: Any, containers: int, inputs: Mapping[str, Any],
                      check: Callable[[Any], Awaitable[None]]) -> Any:
        """A new run of ``containers`` container processes (generation, streams, rescaled
        checkpoints), the job's lock shared with them (``job.lock``). ``await check(job)``
        runs once the run is prepared (``input_ends`` works on the job then), and may raise to
        refuse it: the lock is let go."""
        ...

    async def input_ends(self, job: Any, keys: Iterable[tuple[str, int]]
                         ) -> dict[tuple[str, int], int]:
        """The end offset of each (input stream, partition) given that the job has."""
        ...

    async def abandon(self, job: Any) -> None:
        """Let go of a job ``create`` built for a run that does not start."""
        ...

    def where(self, job: Any) -> str | None:
        """Where the job keeps its state, for the line before a run's outputs; None: nothing
        worth saying."""
        ...

    def feed(self, app: Any, config: Any, given: Mapping[str, Sequence[Any]],
             source: Mapping[str, str], mode: str | None, sample_n: int) -> list[str]:
        """``run --input/--sample`` into the job's inputs (``runtime.engine.feeding``); lines
        for standard error."""
        ...

    def load_file(self, app: Any, config: Any, stream: str, path: str,
                  rows: Callable[[bool], Iterable[tuple[int, Any]]], again: str, *,
                  app_ref: str) -> str:
        """``samza-dsl load``: the (line number, message) pairs ``rows(keyed)`` reads from file
        ``path`` into ``stream``, all of them or none; the line to print. ``again``: the
        command that loads the file again."""
        ...

    def dump_lines(self, app: Any, config: Any, stream: str, limit: int | None, *,
                   offsets: bool, uncommitted: bool, app_ref: str) -> Iterable[bytes]:
        """``samza-dsl dump``: a stream of the job as JSON Lines (``runtime.engine.dump``)."""
        ...

    def status(self, app: Any, config: Any, app_ref: str) -> dict[str, Any]:
        """``samza-dsl status``: the job's status (``runtime.engine.status_rows``)."""
        ...

    def reset(self, app: Any, config: Any, *, outputs: bool, app_ref: str
              ) -> tuple[str, list[str]]:
        """``samza-dsl reset``: the job's name and what was removed (``NeverRan``: nothing
        here to reset)."""
        ...

    def compact(self, app: Any, config: Any, batch: int, *, app_ref: str
                ) -> tuple[str, list[Any]]:
        """``samza-dsl compact``: the job's name and a ``CompactionResult`` per partition."""
        ...

    def open_job(self, app: Any, config: Any, *, app_ref: str) -> Any:
        """The job opened to read its streams without running it (``log_of``, ``physical``,
        ``stream_system``, ``main_system``, ``job_name``, ``plan``, ``close``): where
        ``metrics_in_log``."""
        ...


@dataclass(frozen=True)
class SystemKind:
    """A kind of system: its ``factory`` name (``SystemDescriptor.factory``) and its
    ``JobSystem`` (``module:Class``; None: the in-memory job of ``runtime.memory``, with no
    streams outside a run). ``on_log``: its streams outlive a run (checkpoints, ``load``,
    ``dump``, ``reset``)."""

    factory: str
    jobs: str | None
    on_log: bool

    def job_system(self) -> JobSystem:
        """Its ``JobSystem``, imported when first needed (Kafka's pulls in aiokafka)."""
        if self.jobs is None:
            return _InMemory()  # type: ignore[return-value]
        module, _, name = self.jobs.partition(":")
        made: JobSystem = getattr(importlib.import_module(module), name)()  # foreign: a module
        return made


class _InMemory:
    """The job system of an application whose streams are all in memory: no job outlives a
    run, so every command on one is an error that says where such commands work."""

    label = "memory"
    metrics_in_log = False
    uncommitted_note = ""

    def _refuse(self, app: Any, command: str) -> SamzaError:
        return SamzaError(f"application {app.name!r} has no stream on a LocalSystem nor on "
                          f"Kafka; samza-dsl {command} works on the embedded local log or Kafka "
                          f"topics")

    def feed(self, app: Any, *_: Any) -> list[str]:
        raise self._refuse(app, "run --input into a job's streams")

    def load_file(self, app: Any, *_: Any, **__: Any) -> str:
        raise self._refuse(app, "load")

    def dump_lines(self, app: Any, *_: Any, **__: Any) -> Iterable[bytes]:
        raise self._refuse(app, "dump")

    def status(self, app: Any, *_: Any) -> dict[str, Any]:
        raise self._refuse(app, "status")

    def reset(self, app: Any, *_: Any, **__: Any) -> tuple[str, list[str]]:
        raise self._refuse(app, "reset")

    def compact(self, app: Any, *_: Any, **__: Any) -> tuple[str, list[Any]]:
        raise self._refuse(app, "compact")

    def open_job(self, app: Any, *_: Any, **__: Any) -> Any:
        raise self._refuse(app, "ui")


#: factory -> its kind
SYSTEMS: dict[str, SystemKind] = {k.factory: k for k in [
    SystemKind("kafka", "runtime.kafka.job_system:KafkaJobSystem", on_log=True),
    SystemKind("local", "runtime.local.job_system:LocalJobSystem", on_log=True),
    SystemKind("memory", None, on_log=False),
    # outputs written by the application's sinks (samza_dsl.connectors, runtime.engine.sinks): they
    # run in the job of the application's other streams
    SystemKind("connector", None, on_log=False),
]}


def job_system(app: Any) -> SystemKind:
    """The system an application runs on: Kafka when any of its streams is on Kafka, else the
    local system when any is local, else memory (outputs written by sinks run in any)."""
    spec = app.spec()
    factories = {d.system.factory for d in [*spec.inputs.values(), *spec.outputs.values()]}
    factories.discard("connector")
    unknown = factories - set(SYSTEMS)
    if unknown:
        raise SamzaError(f"application {app.name!r} names systems of unknown kinds "
                         f"({', '.join(sorted(unknown))}); known: {', '.join(sorted(SYSTEMS))}")
    for factory in ("kafka", "local"):
        if factory in factories:
            return SYSTEMS[factory]
    return SYSTEMS["memory"]
