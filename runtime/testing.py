"""``TestRunner``: runs an application in memory over bounded inputs and collects its outputs.

>>> from samza_dsl import StreamApplication, KV
>>> from samza_dsl.systems import MemorySystem
>>> app = StreamApplication("demo")
>>> mem = MemorySystem()
>>> words = mem.input("words", partitions=2)
>>> out = mem.output("lengths")
>>> app.input(words).map(lambda w: KV(w, len(w))).send_to(app.output(out))
>>> result = TestRunner(app).add_input(words, {0: ["a", "bb"], 1: ["ccc"]}).run()
>>> sorted(kv.value for kv in result.messages(out))
[1, 2, 3]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from runtime.engine.container import Container, MemoryCheckpoints
from runtime.engine.handout import Handout
from runtime.engine.late import LateCounts
from runtime.host.metrics import Metrics
from runtime.memory import (
    MemoryBroker,
    MemoryInputs,
    MemoryProducer,
    memory_job,
    memory_store_factory,
    resolve_partitions,
)
from samza_dsl import StreamApplication
from samza_dsl.errors import SamzaError, TaskError
from samza_dsl.jobconfig import job_config
from samza_dsl.stream import OutputStream
from samza_dsl.systems import InputDescriptor, StreamDescriptor

__all__ = ["TestRunner", "TestResult", "resolve_partitions", "memory_store_factory", "memory_job",
           "run_container", "STALL_TIMEOUT"]


class TestResult(LateCounts):
    """Outputs of a ``TestRunner`` run, by output stream; late messages of its windows by window
    and input stream (``late_counts``, ``late(window, stream=...)``: see ``runtime.engine.late``).

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> app, mem = StreamApplication("upper"), MemorySystem()
        >>> words, out = mem.input("words", partitions=2), mem.output("upper", partitions=2)
        >>> app.input(words).map(str.upper).send_to(app.output(out))
        >>> result = TestRunner(app).add_input(words, {0: ["a", "b"], 1: ["c"]}).run()
        >>> result.partitions(out)  # {partition: messages}; a stream id works as well
        {0: ['A', 'B'], 1: ['C']}
        >>> result.messages("upper")  # every partition's, partition by partition
        ['A', 'B', 'C']
        >>> result.late_counts, result.late()  # no windows, so no late messages
        ({}, 0)
    """

    __test__ = False  # not a pytest class

    def __init__(self, broker: MemoryBroker, plan: Any, metrics: Metrics,
                 checkpoints: MemoryCheckpoints, status: dict[str, Any]) -> None:
        self._broker = broker
        self.plan = plan
        self.metrics = metrics
        self.checkpoints = checkpoints
        self.status = status

    def _sid(self, output: Any) -> str:
        sid = output if isinstance(output, str) else output.stream_id \
            if isinstance(output, StreamDescriptor | OutputStream) else None
        if sid not in self._broker.streams:
            raise KeyError(f"no stream {sid!r} in this run; streams: "
                           f"{', '.join(sorted(self._broker.streams))}")
        return sid

    def _late_snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot()

    def partitions(self, output: Any) -> dict[int, list[Any]]:
        sid = self._sid(output)
        n = len(self._broker.streams[sid])
        return {p: self._broker.messages(sid, p) for p in range(n)}

    def messages(self, output: Any) -> list[Any]:
        return [m for msgs in self.partitions(output).values() for m in msgs]

    def headers(self, output: Any) -> dict[int, list[dict[str, bytes]]]:
        """The headers of each message of ``partitions(output)``, in the same places: with
        ``tracing.enabled``, a sampled message's records carry its span's ``traceparent``, as
        on Kafka (docs/tracing.md); a stream declared with no serde holds objects, whose
        headers are always ``{}``.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.serdes import StringSerde
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("heads"), MemorySystem()
            >>> words, out = mem.input("words", serde=StringSerde()), mem.output(
            ...     "upper", serde=StringSerde())
            >>> app.input(words).map(str.upper).send_to(app.output(out))
            >>> traced = {"tracing.enabled": True, "tracing.exporter": "none",
            ...           "tracing.sample.ratio": 1}  # every message sampled
            >>> [sorted(h) for h in TestRunner(app, traced).add_input(words, ["a"]).run()
            ...  .headers(out)[0]]
            [['traceparent']]
            >>> TestRunner(app).add_input(words, ["a"]).run().headers(out)
            {0: [{}]}
        """
        sid = self._sid(output)
        return {p: self._broker.headers(sid, p) for p in range(len(self._broker.streams[sid]))}

    @property
    def dead_letters(self) -> list[dict[str, Any]]:
        """What the run wrote to the job's dead-letter stream (``<job.name>-<job.id>-dead-letter``, also
        ``messages()`` of that name), in order: in memory, under
        ``streams.<id>.samza.serde.error=dead-letter``, the inputs' messages passed over by
        ``max_event_time_ahead`` and the records of a stream that its serde cannot decode, each as
        ``samza-dsl dump`` shows a dead letter, ``{"source": "stream/partition/offset",
        "error": ..., "key": ..., "value": ...}``, with the message's key and value as given
        (a record's bytes where they do not decode).

        Example:
            >>> from datetime import timedelta
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("dl", config={
            ...     "streams.views.samza.serde.error": "dead-letter"}), MemorySystem()
            >>> views = mem.input("views", event_time=lambda v: v["ts"],
            ...                   max_event_time_ahead=timedelta(hours=1))
            >>> app.input(views).send_to(app.output(mem.output("out")))
            >>> result = TestRunner(app).add_input(views, [{"ts": 1}, {"ts": 1e15}]).run()
            >>> result.messages("out"), [d["source"] for d in result.dead_letters]
            ([{'ts': 1}], ['views/0/1'])
            >>> result.counter("views.event-time-ahead-skipped")
            1
        """
        from runtime.host.jobdir import dead_letter_stream

        sid = dead_letter_stream(self.plan.job_name)
        return self.messages(sid) if sid in self._broker.streams else []

    def counter(self, name: str) -> int:
        """A counter of the run's metrics (0 where nothing counted it): for example
        ``<stream>.event-time-ahead-skipped``, the messages of an input passed over for an
        event time too far ahead (``skip`` and ``dead-letter``).

        Example:
            >>> from datetime import timedelta
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> mem = MemorySystem()
            >>> app = StreamApplication("clock",
            ...                         config={"streams.ticks.samza.serde.error": "skip"})
            >>> ticks = mem.input("ticks", event_time=lambda t: t,
            ...                   max_event_time_ahead=timedelta(days=1))
            >>> app.input(ticks).send_to(app.output(mem.output("seen")))
            >>> result = TestRunner(app).add_input(ticks, [1.0, 253402300799.0]).run()
            >>> result.counter("ticks.event-time-ahead-skipped"), result.messages("seen")
            (1, [1.0])
        """
        return int(self.metrics.snapshot().get(name, 0))


class TestRunner:
    """Runs ``app`` in memory: every stream, whatever its system, is an in-memory stream.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import KafkaSystem
        >>> kafka = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9092")  # nothing connects
        >>> app = StreamApplication("lengths")
        >>> words = app.input(kafka.input("words"))
        >>> words.filter(lambda w: w).map(len).send_to(app.output(kafka.output("lengths")))
        >>> runner = TestRunner(app, {"task.max.concurrency": 4})
        >>> runner.add_input("words", ["to", "", "be"]).run(timeout=30).messages("lengths")
        [2, 2]
    """

    __test__ = False

    def __init__(self, app: StreamApplication, config: Mapping[str, Any] | None = None) -> None:
        if not isinstance(app, StreamApplication):
            raise TypeError(f"TestRunner takes a StreamApplication, got {type(app).__name__}")
        self.app = app
        #: the run's config, built once here (``JobConfig.of``) and handed to the plan
        self.config = job_config(app, config)
        self._given = MemoryInputs(app)

    @property
    def _inputs(self) -> dict[str, dict[int, list[Any]]]:
        return self._given.messages

    def add_input(self, descriptor: InputDescriptor | str,
                  messages: Sequence[Any] | Mapping[int, Sequence[Any]]) -> TestRunner:
        """Add bounded input to stream ``descriptor`` (the descriptor or its stream id), checked
        against the application's inputs (a keyed input takes ``KV``s). Returns the runner, so
        calls chain.

        A list is placed as Kafka's producer places it: a ``KV`` with a key goes to the
        partition of its key (murmur2 of the key serialized by the stream's key serde, modulo
        the stream's partitions), so each key's messages stay in one partition, in order. An
        unkeyed message (not a ``KV``, or a ``KV`` whose key is None) goes to partition 0: give
        ``{partition: [messages]}`` to put messages in partitions of your choosing. An input
        that declares no partition count has one partition, or as many as the highest
        partition given that way + 1.

        Example:
            >>> from samza_dsl import KV, StreamApplication
            >>> from samza_dsl.serdes import KVSerde, StringSerde
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("placed"), MemorySystem()
            >>> serde = KVSerde(StringSerde(), StringSerde())
            >>> clicks = mem.input("clicks", serde=serde, partitions=4)
            >>> out = mem.output("seen", serde=serde, partitions=4)
            >>> app.input(clicks).send_to(app.output(out))
            >>> runner = TestRunner(app).add_input(clicks, [KV("ann", "a"), KV("cat", "b"),
            ...                                             KV("ann", "c")])
            >>> runner.run().partitions(clicks)  # ann's two clicks share a partition, as on Kafka
            {0: [], 1: [KV(key='cat', value='b')], 2: [KV(key='ann', value='a'), KV(key='ann', value='c')], 3: []}
            >>> TestRunner(app).add_input(clicks, {2: [KV("ann", "x")]}).run().partitions(out)[2]
            [KV(key='ann', value='x')]
        """
        self._given.add(descriptor, messages)
        return self

    def _partitions(self) -> dict[str, int]:
        return self._given.partitions()

    def run(self, timeout: float | None = None, *, stall_timeout: float | None = None,
            checkpoints: MemoryCheckpoints | None = None,
            producer: Callable[[MemoryBroker], Any] = MemoryProducer,
            clock: Callable[[], int] | None = None) -> TestResult:
        """Run until every input has been consumed and processed, however long that takes while
        the run makes progress.

        Args:
            timeout: seconds the whole run may take (default: no cap).
            stall_timeout: seconds without progress (no message completed, no output written)
                after which the run fails (default ``STALL_TIMEOUT``): an async call that hangs.
            checkpoints: a checkpoint store to use (tests of the runtime itself).
            producer: a producer factory taking the broker (tests of the runtime itself).
            clock: the clock in ms (tests of the runtime itself).

        Returns:
            A ``TestResult``: ``messages(output)``, ``partitions(output)``, ``late_counts``.

        Raises:
            TaskError: an operator failed, or the run stalled: it names the operator, task,
                stream, partition and offset of the oldest message in flight.
            SamzaError: the run took longer than ``timeout``.
        """
        plan, broker, container = memory_job(self.app, self._given, self._partitions(),
                                             self.config, checkpoints=checkpoints,
                                             producer=producer, clock=clock)
        container.env.steady_batches = True  # the same outputs however loaded the machine is
        run_container(container, timeout, stall_timeout=stall_timeout, broker=broker)
        return TestResult(broker, plan, container.metrics, container.checkpoints,  # type: ignore[arg-type]
                          container.status())


#: seconds without progress, while the run has not ended, after which ``TestRunner.run`` fails
STALL_TIMEOUT = 30.0


def run_container(container: Container, timeout: float | None = None, *,
                  stall_timeout: float | None = None, broker: MemoryBroker | None = None) -> None:
    """Run a container on a new event loop (in a thread of its own when the caller's thread
    already runs one, as in Jupyter). No progress (no message handed out or completed, no record
    in ``broker``, no commit) for ``stall_timeout`` s raises a ``TaskError`` naming what is
    stuck; a run past ``timeout`` s raises a SamzaError."""
    stall = STALL_TIMEOUT if stall_timeout is None else float(stall_timeout)
    if stall <= 0 or (timeout is not None and timeout <= 0):
        raise ValueError(f"run(timeout={timeout!r}, stall_timeout={stall_timeout!r}): both are "
                         f"seconds > 0 (timeout None: no cap)")

    def progress() -> tuple[Any, ...]:
        out = sum(len(p) for parts in broker.streams.values() for p in parts) if broker else 0
        return container.progress_mark(), container.commits, out

    async def main() -> None:
        loop = asyncio.get_running_loop()
        run = loop.create_task(container.run())
        started = last_change = loop.time()
        seen = progress()
        interval = min(0.25, stall / 4)
        try:
            while True:
                done, _ = await asyncio.wait({run}, timeout=interval)
                if done:
                    run.result()
                    return
                now = loop.time()
                now_seen = progress()
                if now_seen != seen:
                    seen, last_change = now_seen, now
                elif now - last_change >= stall:
                    raise stalled(container, now - last_change)
                if timeout is not None and now - started >= timeout:
                    status = container.status()
                    raise SamzaError(
                        f"application {container.job.plan.job_name!r} did not finish within "
                        f"{timeout}s (processed {status['processed']}, in flight "
                        f"{status['in_flight']}): raise run(timeout=...) or leave it out (no "
                        f"cap); a stuck run fails after stall_timeout={stall}s without progress")
        finally:
            if not run.done():
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
        return
    # called where a loop already runs (Jupyter): the run gets a loop of its own in a thread
    with ThreadPoolExecutor(1, thread_name_prefix="samza-test-runner") as pool:
        pool.submit(asyncio.run, main()).result()


def _library_dirs() -> tuple[str, ...]:
    import operators

    return tuple(os.path.dirname(m.__file__ or "") + os.sep
                 for m in (asyncio, operators, sys.modules[__package__ or "runtime"]))


def _awaiting(coro: Any) -> tuple[str | None, str | None]:
    """(operator id, the innermost function of the application's own code that waits) along
    the await chain of ``coro``."""
    op_id = where = None
    library = _library_dirs()
    seen = 0
    while coro is not None and seen < 100:
        seen += 1
        frame = getattr(coro, "cr_frame", None)  # foreign: asyncio's task's coroutine or getattr(coro, "ag_frame", None)  # foreign
        if frame is None:
            break
        code = frame.f_code
        if code.co_name == "continue_outputs" and "op_id" in frame.f_locals:
            op_id = frame.f_locals["op_id"]
        if not code.co_filename.startswith(library):
            where = f"{code.co_qualname}() at {code.co_filename}:{frame.f_lineno}"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)  # foreign
    return op_id, where


def stalled(container: Container, idle: float) -> TaskError:
    """The error for a run that made no progress for ``idle`` s: the oldest message in flight,
    its task, stream, partition and offset, and the operator and function it waits in."""
    job = container.job.plan.job_name
    now = time.monotonic()
    oldest: tuple[float, Any, Handout] | None = None
    in_flight = 0
    for t in container.tasks:
        for rec in t.pending:
            if not rec.done:
                in_flight += 1
                if oldest is None or rec.started < oldest[0]:
                    oldest = (rec.started, t, rec)
    if oldest is None:
        processed = sum(t.processed for t in container.tasks)
        return TaskError(f"application {job!r} made no progress for {idle:.1f}s with nothing in "
                         f"flight (processed {processed}): its tasks wait for "
                         f"{container.waiting_for()}; raise run(stall_timeout=...) if a timer is "
                         f"meant to fire later")
    since, task, rec = oldest
    ssp, offset = rec.ssp, rec.offset
    op_id = where = None
    for a in asyncio.all_tasks():
        coro = a.get_coro()
        frame = getattr(coro, "cr_frame", None)  # foreign: asyncio's task's coroutine
        if frame is not None and frame.f_code.co_name == "_finish" \
                and frame.f_locals.get("rec") is rec:
            op_id, where = _awaiting(coro)
            break
    if op_id is None:  # awaits several operators at once (gather): name the one that waits
        for a in asyncio.all_tasks():
            op_id, inner = _awaiting(a.get_coro())
            if op_id is not None:
                where = inner
                break
    op = f"operator {op_id!r}" if op_id else "an operator"
    waits = f", waiting in {where}" if where else ""
    return TaskError(
        f"application {job!r} made no progress for {idle:.1f}s: {op} in task {task.name!r} has "
        f"not completed the message at stream {ssp.stream_id!r} partition {ssp.partition} "
        f"offset {offset} for {now - since:.1f}s{waits} ({in_flight} message(s) in flight). "
        f"An async call may hang: give it a timeout, or raise run(stall_timeout=...) if it is "
        f"only slow",
        op_id=op_id, task=task.name, stream=ssp.stream_id, partition=ssp.partition,
        offset=offset)
