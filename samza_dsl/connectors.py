"""Connectors: outputs written by a ``Sink`` the application gives, on any system.

A sink is one object per task and output stream. The runtime opens it when the task starts,
hands it each message the task sends to the stream, and makes it take part in every commit of
the task (docs/connectors.md):

1. ``open(ctx)`` then ``recover(committed)``, as the task is built: what the task's last
   checkpoint recorded of this sink (its ``checkpoint_id`` and the ``position`` ``prepare`` returned then); a sink that
   commits in two phases rolls forward what that checkpoint covers and drops the rest;
2. ``write(partition, message)`` for each message; it may return an awaitable, which the message
   waits for (back-pressure: at most ``task.max.concurrency`` messages wait per task). A sink
   that overrides ``write_batch(partition, messages, sources)`` gets runs of a task's messages
   in one call instead, where the task hands them out as a run (``Sources`` says which input
   message each comes from);
3. at each commit, before the checkpoint: ``prepare(checkpoint_id)``: make everything written so
   far durable, but not visible yet where the sink can hold it back; its result (``None``, a
   number, a string, or lists and dicts of them) is written into the task's checkpoint;
4. once that checkpoint is durable: ``commit(checkpoint_id)``: make it visible;
5. ``abort()`` when the task stops on an error (what was written since the last ``prepare`` is
   not covered by any checkpoint: the restart writes it again); ``close()`` at the end.

A sink that is at least once implements ``write`` and ``flush`` (the default ``prepare`` calls
``flush``): a crash after the flush and before the checkpoint writes the messages since the last
checkpoint again. A sink whose ``prepare`` keeps what it wrote apart and whose ``recover``
decides by the recorded position is exactly once whatever ``job.processing.guarantee`` says:
the checkpoint is the one place where the decision is made.

>>> class Collect(Sink):
...     def open(self, ctx: SinkContext) -> None:
...         self.rows: list[object] = []
...     def write(self, partition: int, message: object) -> None:
...         self.rows.append(message)
>>> out = SinkSystem("collect").output("rows", sink=lambda ctx: Collect())
>>> out.stream_id, out.system.factory, out.partitions
('rows', 'connector', 1)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, overload

from .errors import SamzaError
from .serdes import Serde
from .systems import OutputDescriptor, SystemDescriptor

__all__ = ["Sink", "SinkContext", "Committed", "Sources", "Replays", "SinkError", "SinkSystem", "batch_and_retry",
           "SinkOutput", "SinkFactory", "CONNECTOR_FACTORY", "SparkInput"]

#: the ``factory`` of a system whose outputs are written by sinks
CONNECTOR_FACTORY = "connector"


class SparkInput(ABC):
    """An input of ``SparkRunner.reprocess`` that says itself how Spark reads it
    (``KafkaRange``, ``IcebergScan``); paths, ``FileInput``, DataFrames and lists of messages
    are read by the runner."""

    @abstractmethod
    def spark_source(self, stream_id: str, descriptor: Any, start_ms: int,
                     config: Mapping[str, Any] | None = None) -> Any:
        """How a reprocessing run reads it as input ``stream_id`` of ``descriptor``, its
        records' clock starting at ``start_ms`` (``config``: the run's):
        a ``runtime.spark.sources.Source``."""


def _no_source() -> tuple[str, int, int] | None:
    return None


def _no_offsets() -> Mapping[tuple[str, int], int]:
    return {}


@dataclass(frozen=True)
class SinkContext:
    """What a sink is told when its task opens it.

    Attributes:
        job_name: The job's name (``<app name>-<app id>``).
        task_name: The task the sink belongs to (``"Partition 3"``): one sink per task and
            output stream, so two tasks never write through the same sink.
        stream_id: The output stream's id.
        system: The name of the output's system.
        partitions: The output stream's partition count.
        config: The job's whole configuration.
        guarantee: ``job.processing.guarantee``: ``"at-least-once"`` or ``"exactly-once"``.
        source: ``source()`` is the input message whose processing calls ``write`` now, as
            ``(stream id, partition, offset)``; None for a message no input message caused
            (a window fired by a timer or a watermark, end-of-stream). A sink that keeps input
            positions of its own skips by it what it already holds (docs/connectors.md).
        offsets: ``offsets()`` is, during ``prepare``, the input offsets the checkpoint being
            prepared records: ``{(stream id, partition): offset}``, the last offset of each
            input partition the task has fully processed (every message up to it, and every
            write those messages made); ``{}`` outside ``prepare``.
    """

    job_name: str
    task_name: str
    stream_id: str
    system: str
    partitions: int
    config: Mapping[str, Any] = field(repr=False)
    guarantee: str = "at-least-once"
    source: Callable[[], tuple[str, int, int] | None] = field(
        default=_no_source, repr=False, compare=False)
    offsets: Callable[[], Mapping[tuple[str, int], int]] = field(
        default=_no_offsets, repr=False, compare=False)

    @property
    def task_id(self) -> str:
        """The task's name as a file name part: ``"Partition 3"`` -> ``"partition-3"``.

        >>> SinkContext("j", "Partition 3 bucket 1 of 2", "s", "x", 1, {}).task_id
        'partition-3-bucket-1-of-2'
        """
        return "-".join(self.task_name.lower().split())


@dataclass(frozen=True)
class Committed:
    """What the task's last checkpoint recorded of a sink.

    Attributes:
        checkpoint_id: The id of the task's last checkpoint that recorded its sinks (0: none;
            ids grow by one per commit of the task, across restarts).
        position: What the sink's ``prepare`` returned for that checkpoint (None: none).
    """

    checkpoint_id: int = 0
    position: Any = None


@dataclass(frozen=True)
class Sources(Sequence[tuple[str, int, int]]):
    """The input messages the messages of one ``write_batch`` call come from: message ``j``
    from offset ``offsets[j]`` of partition ``partition`` of input stream ``stream_id``, so
    ``sources[j]`` is what ``SinkContext.source()`` would say for it alone. The offsets grow
    (several messages of one input message share its offset).

    Example:
        >>> sources = Sources("orders", 2, range(40, 43))
        >>> len(sources), sources[0], sources[-1]
        (3, ('orders', 2, 40), ('orders', 2, 42))
        >>> sources[1:].offsets
        range(41, 43)
    """

    stream_id: str
    partition: int
    offsets: Sequence[int]

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, j: int) -> tuple[str, int, int]: ...

    @overload
    def __getitem__(self, j: slice) -> Sources: ...

    def __getitem__(self, j: int | slice) -> tuple[str, int, int] | Sources:
        if isinstance(j, slice):
            return Sources(self.stream_id, self.partition, self.offsets[j])
        return self.stream_id, self.partition, self.offsets[j]


class Replays:
    """The input positions an external system holds beyond a sink's last checkpoint, as its
    ``recover`` read them back: after a crash between the system's own commit and the job's
    checkpoint, the messages at or before them are replays whose rows are there already. A
    sink skips them (``held`` for one message, ``unheld`` for a run) until its next checkpoint
    passes them (``passed``). ``skipped`` counts what was skipped.

    Example:
        >>> replays = Replays({("orders", 0): 41})
        >>> replays.held(("orders", 0, 41)), replays.held(("orders", 0, 42)), replays.held(None)
        (True, False, False)
        >>> replays.unheld(["a", "b", "c"], Sources("orders", 0, range(40, 43)))
        ['c']
        >>> replays.skipped
        3
        >>> replays.passed({("orders", 0): 42})
        >>> bool(replays)
        False
    """

    def __init__(self, positions: Mapping[tuple[str, int], int] | None = None) -> None:
        #: (stream, partition) -> the last offset the system holds the rows of
        self.upto: dict[tuple[str, int], int] = dict(positions or {})
        self.skipped = 0

    def __bool__(self) -> bool:
        return bool(self.upto)

    def held(self, source: tuple[str, int, int] | None) -> bool:
        """Whether the message from ``source`` (``SinkContext.source()``) is a replay the
        system holds (counted as skipped)."""
        if source is None or not self.upto:
            return False
        if source[2] <= self.upto.get((source[0], source[1]), -1):
            self.skipped += 1
            return True
        return False

    def unheld(self, messages: list[Any], sources: Sources | None) -> list[Any]:
        """The messages of a run (``Sink.write_batch``) that are not replays it holds."""
        if not self.upto or sources is None or not messages:
            return messages
        upto = self.upto.get((sources.stream_id, sources.partition), -1)
        if sources.offsets[0] > upto:
            return messages
        kept = [m for m, o in zip(messages, sources.offsets, strict=True) if o > upto]
        self.skipped += len(messages) - len(kept)
        return kept

    def passed(self, covered: Mapping[tuple[str, int], int]) -> None:
        """A checkpoint covers ``covered`` ((stream, partition) -> offset): the positions it
        passed need no skipping any more."""
        for sp, o in covered.items():
            if o >= self.upto.get(sp, o + 1):
                del self.upto[sp]

    def __repr__(self) -> str:
        return ", ".join(f"{s}[{p}]@{o}" for (s, p), o in sorted(self.upto.items()))


class Sink:
    """An output the application writes itself. Subclass it and override what you need:
    ``write`` always; ``flush`` for at-least-once; ``prepare``, ``commit`` and ``recover``
    for exactly-once (docs/connectors.md). ``write``, ``flush``, ``prepare`` and ``commit`` may
    return awaitables (be coroutines); ``open``, ``recover``, ``abort`` and ``close`` are
    synchronous.

    Errors raised by any method stop the task with an error naming the sink, the stream and
    the task (``SinkError``); raise a ``SinkError`` yourself to say what to do.

    Example:
        >>> class Lines(Sink):
        ...     def open(self, ctx: SinkContext) -> None:
        ...         self.buffer: list[str] = []
        ...         self.lines: list[str] = []
        ...     def write(self, partition: int, message: object) -> None:
        ...         self.buffer.append(str(message))
        ...     def flush(self) -> None:
        ...         self.lines += self.buffer
        ...         self.buffer.clear()
        >>> sink = Lines()
        >>> sink.open(SinkContext("job-1", "Partition 0", "lines", "mem", 1, {}))
        >>> sink.write(0, "a")
        >>> sink.prepare(1)  # before the checkpoint: flushes
        >>> sink.lines
        ['a']
    """

    def open(self, ctx: SinkContext) -> None:
        """The task is being built: the sink's context. Called once, before ``recover``;
        synchronous (it may block)."""
        return None

    def recover(self, committed: Committed) -> None:
        """What the task's last checkpoint recorded of this sink (``Committed()`` on a first
        start): roll forward what ``committed.position`` covers, drop anything prepared after
        it. Called once, after ``open``, before any ``write``; synchronous (it may block)."""
        return None

    def write(self, partition: int, message: Any) -> Awaitable[None] | None:
        """One message the task sends to the stream, in ``partition`` (the stream's partition
        rule's choice: by the key of a ``KV``). Return an awaitable to make the message wait
        for it (back-pressure); the task's checkpoint never passes a message still waiting."""
        raise NotImplementedError(f"{type(self).__name__} must implement write(partition, message)")

    def write_batch(self, partition: int, messages: list[Any],
                    sources: Sources | None) -> Awaitable[None] | None:
        """Several messages the task sends to the stream, in order, all in ``partition``: what
        ``write`` would get one call each, in one call. ``sources[j]`` is the input message
        ``messages[j]`` comes from (``Sources``; None where no input message caused them);
        during the call ``SinkContext.source()`` is the last one's. The list is the sink's to
        keep. An awaitable returned makes the run's last message wait for it (and the
        checkpoint with it).

        The task calls it only on a sink that overrides it, for runs of one input partition's
        messages that reach the stream through one-to-one steps (``map``, ``filter``,
        ``send_to``); any other message, and every message of a sink that does not override
        it, goes to ``write``. By default: ``write`` for each message, in order."""
        waits = [w for w in (self.write(partition, m) for m in messages) if w is not None]
        return _each(waits) if waits else None

    def flush(self) -> Awaitable[None] | None:
        """Make every message written so far durable (at least once). Called by ``prepare``."""
        return None

    def prepare(self, checkpoint_id: int) -> Any:
        """Before the task's checkpoint ``checkpoint_id`` is written: make everything written
        so far durable; return what the checkpoint records of this sink (``recover`` gets it
        back), or an awaitable of it. By default: ``flush()``, and nothing recorded."""
        return self.flush()

    def commit(self, checkpoint_id: int) -> Awaitable[None] | None:
        """The task's checkpoint ``checkpoint_id``, holding what ``prepare`` returned, is
        durable: make what was prepared visible. A crash before this call leaves it to
        ``recover``."""
        return None

    def abort(self) -> None:
        """The task stops on an error or is stopped before its last commit: what was written
        since the last ``prepare`` will be written again after the restart; drop it where the
        sink can. Synchronous."""
        return None

    def close(self) -> None:
        """The task ends (after its last commit, or after ``abort``). Synchronous."""
        return None


async def _each(waits: list[Awaitable[None]]) -> None:
    for w in waits:
        await w


#: makes the sink of one task, given its context (called in the task's process)
SinkFactory = Callable[[SinkContext], Sink]


class SinkError(SamzaError):
    """A sink failed: names the sink, the stream, the task and what to do.

    Example:
        >>> raise SinkError("the disk is full", stream="rows", task="Partition 0")
        Traceback (most recent call last):
        samza_dsl.connectors.SinkError: the disk is full
    """

    def __init__(self, message: str, *, stream: str | None = None, task: str | None = None,
                 step: str | None = None) -> None:
        super().__init__(message)
        self.stream = stream
        self.task = task
        self.step = step


@dataclass(frozen=True)
class SinkOutput(OutputDescriptor):
    """An output stream written by a sink (``SinkSystem(...).output(..., sink=...)``); pass it
    to ``app.output``. Messages reach the sink as the application sends them (no serde).

    Attributes:
        sink: Makes the sink of a task: ``sink(ctx: SinkContext) -> Sink``.
        description: How ``plan`` and errors name the sink (``"parquet files in out/"``).
    """

    sink: SinkFactory | None = field(default=None, compare=False)
    description: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not callable(self.sink):
            raise TypeError(f"output {self.stream_id!r}: sink= must be a callable "
                            f"(ctx: SinkContext) -> Sink, such as a Sink subclass, got "
                            f"{self.sink!r}")

    @property
    def what(self) -> str:
        """The sink as errors name it."""
        return self.description or f"sink of output {self.stream_id!r}"

    def make(self, ctx: SinkContext) -> Sink:
        """The sink of one task.

        Raises:
            SinkError: the factory did not give a ``Sink``.
        """
        assert self.sink is not None
        made = self.sink(ctx)
        if not isinstance(made, Sink):
            raise SinkError(f"output {self.stream_id!r}: sink= gave {type(made).__name__}, not "
                            f"a samza_dsl.connectors.Sink: subclass Sink", stream=self.stream_id,
                            task=ctx.task_name)
        return made


@dataclass(frozen=True)
class SinkSystem(SystemDescriptor):
    """A system of outputs written by sinks.

    Example:
        >>> system = SinkSystem("sqlite")
        >>> system.factory
        'connector'
    """

    factory: str = CONNECTOR_FACTORY

    def output(self, stream_id: str, *, serde: Serde[Any] | None = None,
               physical_name: str | None = None, partitions: int | None = None,
               sink: SinkFactory | None = None, description: str = "") -> SinkOutput:
        """An output stream written by ``sink``: ``sink(ctx)`` makes each task's ``Sink``.

        Args:
            stream_id: The stream's id in the application, matching ``[A-Za-z0-9._-]+``.
            serde: Unused: a sink takes messages as they are; must be None.
            physical_name: The name the sink may use for the stream; by default ``stream_id``.
            partitions: The stream's partition count, which the partition rule picks from
                (default 1: every message in partition 0).
            sink: ``sink(ctx: SinkContext) -> Sink``, called once per task.
            description: How errors and plans name the sink.

        Returns:
            The ``SinkOutput``, for ``app.output``.

        Raises:
            TypeError: ``sink`` is not callable, or ``serde`` is given.
        """
        if serde is not None:
            raise TypeError(f"output {stream_id!r}: a sink takes messages as they are; leave "
                            f"serde out (the sink encodes them)")
        return SinkOutput(self, stream_id, None, physical_name or stream_id,
                          1 if partitions is None else partitions, sink=sink,
                          description=description)


def batch_and_retry(stream_id: str, batch_rows: Any, retry: Any) -> float:
    """An output's ``batch_rows`` (an int >= 1) and ``retry`` (seconds or a ``timedelta``, > 0)
    checked; the retry in seconds. ``ValueError`` names the output and what is wrong.

    Example:
        >>> batch_and_retry("out", 500, timedelta(seconds=30))
        30.0
    """
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ValueError(f"output {stream_id!r}: batch_rows must be an int >= 1")
    seconds = retry.total_seconds() if isinstance(retry, timedelta) else float(retry)
    if not seconds > 0:
        raise ValueError(f"output {stream_id!r}: retry must be > 0 seconds")
    return seconds
