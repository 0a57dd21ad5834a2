"""The runtime's side of connectors (``samza_dsl.connectors``): a task's sinks, opened when it
starts, written by its terminals and taken through each of its commits.

A task whose application has ``SinkOutput`` streams gets a ``TaskSinks`` when it is built
(``task_producer``): each sink is made, opened and handed what the task's checkpoint recorded of
it (``recover``), and the task's producer is wrapped (``SinkProducer``) so that the terminals of
those streams write to the sinks and every other stream goes to the producer as before. A sink
that overrides ``write_batch`` also takes runs of messages from the task's batch runs
(``batch_sender``, ``runtime.engine.batch_sink.sink_run``). The
committer keeps the task's sinks (``Committer.sinks``): ``runtime.engine.commit`` calls ``prepare``
before the checkpoint and ``commit`` after it; the checkpoint records, per task, the id of the
checkpoint and each sink's position (``checkpoints.merge(sinks=...)``). The container closes
them with the task (``abort`` first, unless the task ended with its last commit).

Errors of a sink are ``SinkError``s naming the sink, its output stream, the task, what it was
doing, and what happens next.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from runtime.engine.codec import BufferedProducer
from runtime.engine.origins import Applied, StampingProducer, Stamps, wire
from runtime.engine.systems import Producer, ProducerCounts, StreamSink
from runtime.engine.trace_out import RecordLists
from samza_dsl.connectors import Committed, Sink, SinkContext, SinkError, SinkOutput, Sources
from samza_dsl.errors import AccessRefused, ConfigError
from samza_dsl.jobconfig import JobConfig

__all__ = ["TaskSinks", "SinkProducer", "sink_outputs", "task_producer"]

_log = logging.getLogger("samza_dsl.connectors")

#: a sink's errors that stand as they are: its own, and a system's refusal of the job
_OWN = (SinkError, AccessRefused)


def sink_outputs(plan: Any) -> dict[str, SinkOutput]:
    """The application's outputs written by sinks, by stream id."""
    return {sid: d for sid, d in plan.app.outputs.items() if isinstance(d, SinkOutput)}


def task_producer(task: Any, env: Any) -> Producer:
    """Where ``task``'s records go: the container's producer, or under exactly-once the task's
    own (``TaskEnv.task_producer``); where the application has outputs written by sinks, with
    those taken out to the task's sinks, opened now and kept by the committer."""
    inner: Producer = env.producer if env.task_producer is None else env.task_producer(task)
    if not sink_outputs(task.plan):
        return inner
    sinks = TaskSinks(task.name, task.plan, env.config, env.committer.checkpoints,
                      task.source)
    env.committer.sinks[task.name] = sinks
    return SinkProducer(inner, sinks)


def with_origins(task: Any, producer: Producer, guarantee: str, **stamping: Any
                 ) -> tuple[Producer, Stamps | None, Applied | None]:
    """``task``'s producer with its records into intermediate streams carrying their origins,
    their ``Stamps``, and what the task applied of the intermediate streams it reads
    (``runtime.engine.origins``): at least once, where the producer under it writes records (a
    system that stores streams); else ``producer`` as it is, None and None. Traced, records
    into outputs carry the ``traceparent`` of their sampled message, in memory too (where
    nothing replays, with no origins). ``stamping``: what ``runtime.engine.origins.wire`` takes
    besides."""
    base = producer.inner if isinstance(producer, SinkProducer) else producer
    traced = task.env.tracing is not None
    if not isinstance(base, BufferedProducer):
        if traced and isinstance(base, RecordLists):  # in memory (TestRunner)
            return _traced_in_memory(task, producer, base, stamping)
        return producer, None, None
    stamps, applied = wire(task, guarantee, traced=traced, **stamping)
    if stamps is None:
        return producer, None, applied
    plan = task.plan
    inter = () if guarantee == "exactly-once" else plan.intermediate_streams
    if stamps.ordered and inter:  # where the log keeps origins compactly, the ids of its keys
        stamps.ids = base.origin_ids(sorted(set(stamps.keys.values())))
    # traced: records into outputs (and, with no origins, intermediate streams) carry the
    # traceparent of the sampled message that made them
    outs = [*plan.output_streams, *plan.intermediate_streams] if traced else ()
    stamped: Any = StampingProducer(base, stamps, inter, outs)
    if isinstance(producer, SinkProducer):
        return SinkProducer(stamped, producer.sinks), stamps, applied
    return stamped, stamps, applied


def _traced_in_memory(task: Any, producer: Producer, base: RecordLists,
                      stamping: dict[str, Any]
                      ) -> tuple[Producer, Stamps | None, Applied | None]:
    """A traced task's producer in memory, where nothing replays: its records carry no origins,
    but those of its outputs and intermediate streams that hold records carry the
    ``traceparent`` of their sampled message, as on Kafka (its stamps are those of a task
    exactly once: for traces only)."""
    stamps, _ = wire(task, "exactly-once", traced=True, **stamping)
    if stamps is None:  # (traced, there are stamps)
        return producer, None, None
    plan = task.plan
    streams = [sid for sid in (*plan.output_streams, *plan.intermediate_streams)
               if base.holds_records(sid)]
    traced: Any = StampingProducer(base, stamps, (), streams)
    if isinstance(producer, SinkProducer):
        return SinkProducer(traced, producer.sinks), stamps, None
    return traced, stamps, None


async def _settle(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


def _sync(step: str, result: Any) -> None:
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)  # foreign: what a user's sink returned
        if close is not None:
            close()  # a coroutine never awaited
        raise TypeError(f"{step}() returned an awaitable: it must be synchronous (do the "
                        f"waiting in write, prepare or commit)")


class TaskSinks:
    """The sinks of task ``task_name``: one per output stream written by a sink."""

    def __init__(self, task_name: str, plan: Any, config: JobConfig,
                 checkpoints: Any,
                 source: Callable[[], tuple[str, int, int] | None] | None = None) -> None:
        self.task_name = task_name
        self.outputs = sink_outputs(plan)
        self.checkpoints = checkpoints
        if config.task.async_commit:
            raise ConfigError(
                f"task.async.commit=true: outputs {', '.join(sorted(self.outputs))} are written "
                f"by sinks, whose commit must cover exactly the messages the checkpoint covers, "
                f"so a commit may not run while messages are in flight; leave "
                f"task.async.commit out")
        guarantee = config.job.processing_guarantee
        job_name = config.job.job_name
        #: during ``prepare``: the offsets the checkpoint being prepared records
        self._covering: dict[tuple[str, int], int] = {}
        source = source or (lambda: None)
        self.contexts = {
            sid: SinkContext(job_name, task_name, sid, d.system.name,
                             plan.streams[sid].partitions, config, guarantee, source,
                             self._offsets)
            for sid, d in self.outputs.items()}
        #: made, opened and recovered now, before the task's wiring takes their ``write``
        self.sinks: dict[str, Sink] = {}
        for sid, d in self.outputs.items():
            try:
                self.sinks[sid] = d.make(self.contexts[sid])
            except _OWN:
                raise
            except Exception as exc:
                raise self._error(sid, "make", exc, "The task did not start; fix the sink= "
                                  "factory") from exc
        #: the id of the task's last checkpoint that recorded its sinks
        self.checkpoint_id = 0
        #: messages handed to each sink's ``write`` (for a run's summary)
        self.written: dict[str, int] = dict.fromkeys(self.outputs, 0)
        #: ``prepare`` ran and ``commit`` has not yet: the id it prepared
        self._prepared: int | None = None
        self._start()

    def _error(self, sid: str, step: str, exc: BaseException, then: str) -> SinkError:
        d = self.outputs[sid]
        return SinkError(
            f"{d.what} (output {sid!r} of system {d.system.name!r}) failed in task "
            f"{self.task_name!r} at {step}: {type(exc).__name__}: {exc}. {then}",
            stream=sid, task=self.task_name, step=step)

    def _start(self) -> None:
        """Open each sink and hand it what the task's last checkpoint recorded of it."""
        record = self.checkpoints.read_sinks(self.task_name) or {}
        self.checkpoint_id = int(record.get("id", 0))
        positions = record.get("positions", {})
        for sid in self.outputs:
            step = "open"
            sink = self.sinks[sid]
            try:
                # typed to return None; a coroutine there is refused
                opening: Callable[..., Any] = sink.open
                _sync(step, opening(self.contexts[sid]))
                step = "recover"
                recovering: Callable[..., Any] = sink.recover
                _sync(step, recovering(Committed(self.checkpoint_id if sid in positions
                                                 else 0, positions.get(sid))))
            except _OWN:
                raise
            except Exception as exc:
                raise self._error(sid, step, exc, "The task did not start; fix what the sink "
                                  "needs and run the job again") from exc

    def sender(self, stream_id: str) -> Callable[[int, Any], Any]:
        """What the task's terminal of ``stream_id`` calls: the sink's ``write``, its errors
        named; an awaitable it returns is awaited by the message."""
        write = self.sinks[stream_id].write
        written = self.written
        failed, waited = self._named(stream_id, "write", "The checkpoint stays before the "
                                     "message, so a restart writes it again")

        def send(partition: int, message: Any) -> Any:
            try:
                pending = write(partition, message)
            except _OWN:
                raise
            except Exception as exc:
                raise failed(partition, exc) from exc
            written[stream_id] += 1
            return None if pending is None else waited(pending, partition)
        return send

    def batch_sender(self, stream_id: str) -> Callable[[int, list[Any], Sources], Any] | None:
        """What a task's run of ``stream_id``'s messages calls (``runtime.engine.batch_sink.sink_run``):
        the sink's ``write_batch``, its errors named, as ``sender``'s; None where the sink does
        not override ``write_batch`` (its messages go to ``write`` one by one)."""
        sink = self.sinks[stream_id]
        if type(sink).write_batch is Sink.write_batch:
            return None
        write_batch = sink.write_batch
        written = self.written
        failed, waited = self._named(stream_id, "write_batch", "The checkpoint stays before "
                                     "the messages, so a restart writes them again")

        def send(partition: int, messages: list[Any], sources: Sources) -> Any:
            try:
                pending = write_batch(partition, messages, sources)
            except _OWN:
                raise
            except Exception as exc:
                raise failed(partition, exc) from exc
            written[stream_id] += len(messages)
            return None if pending is None else waited(pending, partition)
        return send

    def _named(self, stream_id: str, step: str, then: str
               ) -> tuple[Callable[[int, Exception], SinkError],
                          Callable[[Awaitable[None], int], Awaitable[None]]]:
        """The errors of a call ``step`` of ``stream_id``'s sink as ``SinkError``s: ``failed``
        for one it raised, ``waited`` awaiting what it returned."""
        error = self._error

        def failed(partition: int, exc: Exception) -> SinkError:
            return error(stream_id, f"{step} (partition {partition})", exc, then)

        async def waited(pending: Awaitable[None], partition: int) -> None:
            try:
                await pending
            except _OWN:
                raise
            except Exception as exc:
                raise failed(partition, exc) from exc
        return failed, waited

    def _offsets(self) -> Mapping[tuple[str, int], int]:
        return self._covering

    async def prepare(self, offsets: Mapping[Any, int] | None = None) -> dict[str, Any]:
        """Before the checkpoint of ``offsets`` (``{SSP: last offset processed}``): each
        sink's ``prepare``; what the checkpoint records."""
        cid = self.checkpoint_id + 1
        positions: dict[str, Any] = {}
        self._covering = {(ssp[0], ssp[1]): o for ssp, o in (offsets or {}).items()}
        try:
            for sid, sink in self.sinks.items():
                try:
                    positions[sid] = await _settle(sink.prepare(cid))
                except _OWN:
                    raise
                except Exception as exc:
                    raise self._error(sid, f"prepare (checkpoint {cid})", exc,
                                      "No checkpoint was written: a restart starts from the "
                                      "last one and writes its messages again") from exc
        finally:
            self._covering = {}
        self._prepared = cid
        return {"id": cid, "positions": positions}

    async def commit(self) -> None:
        """The checkpoint holding ``prepare``'s record is durable: each sink's ``commit``."""
        cid = self._prepared
        if cid is None:
            return
        self.checkpoint_id = cid
        self._prepared = None
        for sid, sink in self.sinks.items():
            try:
                await _settle(sink.commit(cid))
            except _OWN:
                raise
            except Exception as exc:
                raise self._error(sid, f"commit (checkpoint {cid})", exc,
                                  "The checkpoint is written: a restart hands it to the sink's "
                                  "recover, which must finish the commit") from exc

    def close(self, failed: bool) -> None:
        """The task ends: ``abort`` first where it failed or did not finish; then ``close``.
        Both are synchronous; an error here is logged (the task's own error, if any, stands)."""
        for sid, sink in self.sinks.items():
            for step, call in ((("abort", sink.abort),) if failed else ()) + (("close", sink.close),):
                try:
                    _sync(step, call())
                except Exception as exc:
                    _log.error("%s", self._error(sid, step, exc, "Its files or rows past the last "
                                                 "checkpoint are left to its recover"))
        self.sinks.clear()


class SinkProducer:
    """A task's producer with the streams written by its sinks taken out: their terminals
    write to the sinks, every other stream goes to ``inner``."""

    def __init__(self, inner: Producer, sinks: TaskSinks) -> None:
        self.inner = inner
        self.sinks = sinks

    def counts(self) -> ProducerCounts | None:
        return self.inner.counts()

    def record_sink(self, stream_id: str) -> StreamSink | None:
        if stream_id in self.sinks.outputs:
            return None
        return self.inner.record_sink(stream_id)

    def send(self, stream_id: str, partition: int, payload: Any) -> None:
        if stream_id in self.sinks.outputs:
            self.sinks.sender(stream_id)(partition, payload)
            return
        self.inner.send(stream_id, partition, payload)

    def sender(self, stream_id: str) -> Callable[[int, Any], None]:
        if stream_id in self.sinks.outputs:
            return self.sinks.sender(stream_id)
        return self.inner.sender(stream_id)

    def batch_sender(self, stream_id: str) -> Callable[[int, list[Any], Sources], Any] | None:
        """``TaskSinks.batch_sender`` of a stream written by a sink; None for any other."""
        if stream_id in self.sinks.outputs:
            return self.sinks.batch_sender(stream_id)
        return None

    def signal(self) -> None:
        self.inner.signal()

    async def flush(self) -> None:
        await self.inner.flush()

    async def close(self) -> None:
        await self.inner.close()
