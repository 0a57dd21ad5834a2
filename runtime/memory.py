"""The in-memory system: partitioned streams, for tests and local runs.

Offsets are list indexes. Bounded inputs end with an ``EndOfStream`` record. A stream the job
writes that is declared with a serde (other than ``NoOpSerde``) holds records, as a byte
system's do (``runtime.engine.codec``): its producer encodes each message with the codec the
local log and Kafka use, failing with their error, and its consumer decodes them under the
stream's serde error policy, so what a stage reads (a tuple under ``JsonSerde`` reads as a list)
and what fails to encode are what they are in the job. An input declared with a serde holds the
messages given and carries each batch through the serde as it is read. A stream declared with
none holds the objects themselves."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from runtime.engine.codec import Record, StreamCodec, control_record, serde_error_policy
from runtime.engine.container import Container, MemoryCheckpoints
from runtime.engine.job import SSP, build_job_model
from runtime.engine.records import EndOfStream, is_control
from runtime.engine.systems import Consumer, StreamSink
from runtime.engine.trace_out import RecordLists
from runtime.host.metrics import Metrics
from runtime.state.memory_store import MemoryStores
from samza_dsl import StreamApplication
from samza_dsl.config import did_you_mean
from samza_dsl.errors import SamzaError, SerdeError
from samza_dsl.kv import KV
from samza_dsl.serdes import BytesSerde, KVSerde, NoOpSerde, Serde, StringSerde
from samza_dsl.systems import InputDescriptor

if TYPE_CHECKING:
    from runtime.engine.event_time_ahead import AheadRule

__all__ = ["MemoryBroker", "MemoryConsumer", "MemoryProducer", "MemoryInputs", "memory_job",
           "memory_store_factory", "resolve_partitions"]

#: the run whose control records an in-memory stream of records holds: there is only one
GENERATION = 0

#: the object cache of an in-memory store whose config sets no size: every entry
UNBOUNDED_CACHE = 1 << 62


def _declared_codec(stream_id: str, serde: Serde[Any] | None, policy: str = "fail",
                   **kwargs: Any) -> StreamCodec | None:
    """The codec of a stream declared with ``serde``; None for one declared with none, or with
    ``NoOpSerde`` (as key or value serde too), whose messages stay objects in memory."""
    if serde is None or isinstance(serde, NoOpSerde) or (isinstance(serde, KVSerde) and (
            isinstance(serde.key_serde, NoOpSerde) or isinstance(serde.value_serde, NoOpSerde))):
        return None
    return StreamCodec(stream_id, serde, policy=policy, **kwargs)


class MemoryBroker:
    """Holds every in-memory stream of one run."""

    def __init__(self) -> None:
        self.streams: dict[str, list[list[Any]]] = {}
        #: the codecs of the streams that hold records (declared with a serde)
        self.codecs: dict[str, StreamCodec] = {}
        self._event: asyncio.Event | None = None

    def create(self, stream_id: str, partitions: int) -> None:
        existing = self.streams.get(stream_id)
        if existing is not None:
            if len(existing) != partitions:
                raise ValueError(f"in-memory stream {stream_id!r} has {len(existing)} partitions, "
                                 f"not {partitions}")
            return
        self.streams[stream_id] = [[] for _ in range(partitions)]

    def partitions(self, stream_id: str) -> int | None:
        s = self.streams.get(stream_id)
        return None if s is None else len(s)

    def append(self, stream_id: str, partition: int, payload: Any) -> int:
        log = self.streams[stream_id][partition]
        log.append(payload)
        if self._event is not None:
            self._event.set()
        return len(log) - 1

    def extend(self, stream_id: str, partition: int, payloads: Iterable[Any]) -> None:
        self.streams[stream_id][partition].extend(payloads)
        if self._event is not None:
            self._event.set()

    def end(self, stream_id: str) -> None:
        """Mark every partition of a bounded stream as ended."""
        end: Any = EndOfStream(None)
        if stream_id in self.codecs:
            end = control_record(end, GENERATION)
        for p in range(len(self.streams[stream_id])):
            self.append(stream_id, p, end)

    def event(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def messages(self, stream_id: str, partition: int) -> list[Any]:
        """The messages of a partition, as a consumer reading it with its serde gets them."""
        from runtime.engine.codec import Skipped

        log = self.streams[stream_id][partition]
        codec = self.codecs.get(stream_id)
        if codec is not None:
            log = StreamCodec(stream_id, codec.serde).decode_batch(
                SSP(stream_id, partition), 0, log, GENERATION)
        return [m for m in log if not is_control(m) and type(m) is not Skipped]

    def headers(self, stream_id: str, partition: int) -> list[dict[str, bytes]]:
        """The headers of each message ``messages`` gives, in the same order: a record's
        (a traced run's ``traceparent``), ``{}`` for a message of a stream of objects."""
        from runtime.engine.codec import Skipped

        log = self.streams[stream_id][partition]
        codec = self.codecs.get(stream_id)
        if codec is None:
            return [{} for m in log if not is_control(m)]
        got = StreamCodec(stream_id, codec.serde).decode_batch(
            SSP(stream_id, partition), 0, log, GENERATION)
        return [dict(r[2] or ()) for r, m in zip(log, got, strict=True)
                if not is_control(m) and type(m) is not Skipped]


class MemoryConsumer(Consumer):
    """Reads in-memory partitions. A reader key (a task and its partition) has its own position,
    so a broadcast partition is read by every task."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self.codecs = broker.codecs
        self.positions: dict[Any, tuple[SSP, int]] = {}
        #: where reading of each partition began
        self.starts: dict[SSP, int] = {}
        self._woken = False
        #: input stream -> its ``max_event_time_ahead`` check (``runtime.engine.event_time_ahead``);
        #: a message it passes over under ``dead-letter`` goes to the stream ``dead_letter``
        self.ahead: dict[str, AheadRule] = {}
        self.dead_letter: str | None = None
        #: input stream declared with a serde -> its codec: the stream holds the messages
        #: given, each carried through the serde as it is read (``_read_given``)
        self.given: dict[str, StreamCodec] = {}

    def register(self, key: Any, ssp: SSP, next_offset: int | None) -> None:
        start = 0 if next_offset is None else next_offset
        self.positions[key] = (ssp, start)
        self.starts[ssp] = min(self.starts.get(ssp, start), start)

    async def poll(self, keys: Iterable[Any], max_per_key: int, timeout: float | None = None,
                   limits: Mapping[Any, int] | None = None,
                   ) -> list[tuple[Any, int, list[Any]]]:
        """Batches of (key, first offset, payloads), each at most ``max_per_key`` records (or the
        key's own limit in ``limits``); waits until one is available."""
        keys = list(keys)
        event = self.broker.event()
        streams = self.broker.streams
        codecs = self.codecs
        self._woken = False
        while True:
            event.clear()
            out = []
            for key in keys:
                ssp, pos = self.positions[key]
                log = streams[ssp.stream_id][ssp.partition]
                if pos < len(log):
                    batch = log[pos:pos + (max_per_key if limits is None
                                           else limits.get(key, max_per_key))]
                    self.positions[key] = (ssp, pos + len(batch))
                    sid = ssp.stream_id
                    codec = codecs.get(sid) if codecs else None
                    if codec is not None:
                        batch = codec.decode_batch(ssp, pos, batch, GENERATION)
                    else:
                        codec = self.given.get(sid) if self.given else None
                        if codec is not None:
                            batch = self._read_given(codec, ssp, pos, batch)
                        if self.ahead and sid in self.ahead:
                            self._check_ahead(ssp, pos, batch)
                    out.append((key, pos, batch))
            if out or not keys:
                return out
            try:
                # asyncio.timeout, not wait_for: wait_for can swallow a cancellation on 3.11
                async with asyncio.timeout(timeout):
                    await event.wait()
            except TimeoutError:
                return []
            if self._woken:  # the caller's set of partitions changed: let it ask again
                self._woken = False
                return []

    def _read_given(self, codec: StreamCodec, ssp: SSP, first: int, batch: list[Any]
                    ) -> list[Any]:
        """A batch of messages given to an input declared with a serde, as the job reads them
        from the records a producer writes: encoded, failing as a producer fails on a message
        the serde cannot encode, and decoded under the stream's policy. Messages that read
        back as they are (``_as_given``), checked by columns, are the batch itself."""
        body = batch[:-1] if batch and type(batch[-1]) is EndOfStream else batch
        if _as_given(codec, body):
            return batch
        records = []
        for i, m in enumerate(batch):
            if is_control(m):
                records.append(control_record(m, GENERATION))
                continue
            try:
                records.append(codec.encode(m))
            except SerdeError as exc:
                cause = exc.__cause__
                reason = cause.reason if isinstance(cause, SerdeError) else str(cause or exc)
                raise SerdeError(
                    f"input {ssp.stream_id!r}: the message at partition {ssp.partition} offset "
                    f"{first + i} cannot be encoded by the input's serde "
                    f"{codec.serde.describe()}, as a producer would have to: {reason}; give "
                    f"the input messages its serde takes, or declare the serde they are "
                    f"written with", stream=ssp.stream_id, partition=ssp.partition,
                    offset=first + i) from None
        return codec.decode_batch(ssp, first, records, GENERATION)

    def _check_ahead(self, ssp: SSP, first: int, batch: list[Any]) -> None:
        """The messages of ``batch`` too far ahead of the wall clock under the stream's serde
        error policy, as a byte system's codec does: ``fail`` raises, ``skip`` and
        ``dead-letter`` put a ``Skipped`` in their place, ``dead-letter`` also writes
        ``{"source", "error", "key", "value"}`` (as ``samza-dsl dump`` shows a dead letter) to
        the dead-letter stream. (A stream of records has the check in its codec.)"""
        from runtime.engine.codec import Skipped

        rule = self.ahead[ssp.stream_id]
        for i in rule.scan(batch, rule.limit()):
            m = batch[i]
            t = rule.seconds(m)
            if rule.policy == "fail":
                raise rule.failure(ssp.partition, first + i, t)
            reason = rule.passed_over(ssp.partition, first + i, t)
            if rule.policy == "dead-letter":
                self.write_dead_letter(ssp, first + i, m, reason)
            batch[i] = Skipped(reason)

    def write_dead_letter(self, ssp: SSP, offset: int, m: Any, reason: str,
                          record: bool = False) -> None:
        """Message ``m`` (a record, if ``record``) passed over at ``offset`` of ``ssp``, to the
        dead-letter stream: ``{"source", "error", "key", "value"}``, a record's key and value
        decoded where they can be, its bytes where not."""
        if self.dead_letter is None:
            return
        if not record:
            k, v = (m.key, m.value) if type(m) is KV else (None, m)
        else:
            codec = self.codecs.get(ssp.stream_id) or self.given[ssp.stream_id]
            serde = codec.serde
            ks, vs = ((serde.key_serde, serde.value_serde) if isinstance(serde, KVSerde)
                      else (None, serde))
            k, v = _decoded(ks, m[0]), _decoded(vs, m[1])
        self.broker.append(self.dead_letter, 0, {
            "source": f"{ssp.stream_id}/{ssp.partition}/{offset}", "error": reason,
            "key": k, "value": v})

    async def read_bounds(self, keys: Iterable[Any]) -> dict[Any, tuple[int, int]]:
        """Per reader key: the next offset it reads, and its partition's end offset now."""
        out = {}
        for key in keys:
            ssp, pos = self.positions[key]
            out[key] = (pos, len(self.broker.streams[ssp.stream_id][ssp.partition]))
        return out

    def wakeup(self) -> None:
        """End a waiting ``poll`` now: the set of partitions to read has changed."""
        self._woken = True
        self.broker.event().set()

    def waiting_for(self, key: Any) -> str:
        ssp, pos = self.positions[key]
        return f"read to offset {pos} of {len(self.broker.streams[ssp.stream_id][ssp.partition])}"

    def behind(self, key: Any) -> bool:
        ssp, pos = self.positions[key]
        return pos < len(self.broker.streams[ssp.stream_id][ssp.partition])

    def progress(self) -> list[tuple[SSP, int, int]]:
        """Per partition read: where reading began, and the partition's end."""
        return [(ssp, start, len(self.broker.streams[ssp.stream_id][ssp.partition]))
                for ssp, start in list(self.starts.items())]

    async def close(self) -> None:
        return None


def _decoded(serde: Serde[Any] | None, data: bytes | None) -> Any:
    """``data`` decoded by ``serde``, or as it is where it does not decode."""
    if serde is None or data is None:
        return data
    try:
        return serde.deserialize(data)
    except Exception:
        return data


class MemoryProducer(RecordLists):
    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker

    def holds_records(self, stream_id: str) -> bool:
        """Whether ``stream_id`` holds records (declared with a serde), whose headers a traced
        run writes the ``traceparent`` of a sampled message into (``runtime.engine.sinks``)."""
        return stream_id in self.broker.codecs

    def buffer(self, stream_id: str, partition: int) -> list[Any]:
        """The records of one partition, the last written last (as ``BufferedProducer``'s)."""
        return self.broker.streams[stream_id][partition]

    def counts(self) -> None:
        """Nothing is counted in memory (``runtime.engine.systems.Producer.counts``)."""
        return None

    def send(self, stream_id: str, partition: int, payload: Any) -> None:
        codec = self.broker.codecs.get(stream_id)
        if codec is not None:
            payload = (control_record(payload, GENERATION) if is_control(payload)
                       else codec.encode(payload))
        self.broker.append(stream_id, partition, payload)

    def sender(self, stream_id: str) -> Any:
        """A fast ``send(partition, payload)`` for one stream; ``signal()`` wakes readers."""
        logs = self.broker.streams[stream_id]
        codec = self.broker.codecs.get(stream_id)
        if codec is not None:
            encode = codec.encode

            def send_record(partition: int, payload: Any) -> None:
                logs[partition].append(encode(payload))
            return send_record

        def send(partition: int, payload: Any) -> None:
            logs[partition].append(payload)
        return send

    def record_sink(self, stream_id: str) -> StreamSink:
        """For the task's fused terminals: the partitions of a stream, each taking its
        messages as they are (``runtime.engine.systems.StreamSink`` with no ``encode``), or,
        for a stream of records, encoded as a byte system's producer encodes them."""
        appends = [log.append for log in self.broker.streams[stream_id]]
        codec = self.broker.codecs.get(stream_id)
        if codec is None:
            return StreamSink(appends)
        key, value = codec.fast_serializers()
        return StreamSink(appends, key, value, codec.encode)

    def signal(self) -> None:
        event = self.broker._event
        if event is not None:
            event.set()

    async def flush(self) -> None:
        self.signal()

    async def close(self) -> None:
        return None


class MemoryInputs:
    """Bounded inputs given in memory (``TestRunner.add_input``, ``LocalRunner(inputs=...)``):
    per input stream, the messages in the order given, checked against ``app``'s inputs.

    A list is placed as a producer would place it once the run's partition counts are known
    (``placed``): a ``KV`` with a key goes to its key's partition (murmur2 of the key serialized
    by the stream's key serde, ``runtime.engine.wiring.partition_of``), any other message to partition
    0; ``{partition: [messages]}`` puts them where it says."""

    def __init__(self, app: StreamApplication) -> None:
        self.app = app
        #: per stream, what each add gave: ``{partition: messages}``, or a list to place by key
        self.given: dict[str, list[dict[int, list[Any]] | list[Any]]] = {}

    def add(self, descriptor: InputDescriptor | str,
            messages: Sequence[Any] | Mapping[int, Sequence[Any]]) -> None:
        sid = descriptor if isinstance(descriptor, str) else descriptor.stream_id
        inputs = self.app.spec().inputs
        d = inputs.get(sid)
        if d is None:
            raise SamzaError(f"{sid!r} is not an input of application {self.app.name!r}"
                             f"{did_you_mean(sid, inputs)}; inputs: "
                             f"{', '.join(sorted(inputs)) or 'none'}")
        if isinstance(messages, Mapping):
            parts = {p: list(msgs) for p, msgs in messages.items()}
            for p in parts:
                if not isinstance(p, int) or p < 0:
                    raise SamzaError(f"input {sid!r}: partition keys are ints >= 0, got {p!r}")
                if d.partitions is not None and p >= d.partitions:
                    raise SamzaError(f"input {sid!r} has {d.partitions} partitions; no "
                                     f"partition {p}")
            chunk: dict[int, list[Any]] | list[Any] = parts
        else:
            parts, chunk = {0: list(messages)}, list(messages)
        if d.keyed:
            for p, msgs in parts.items():
                if set(map(type, msgs)) <= {KV}:  # all KVs: no message to look at one by one
                    continue
                for i, m in enumerate(msgs):
                    if not isinstance(m, KV):
                        where = f"partition {p}" if isinstance(chunk, dict) else "the list"
                        raise SamzaError(f"input {sid!r} is keyed (KVSerde): message {i} of "
                                         f"{where} must be a KV(key, value), got {m!r}")
        self.given.setdefault(sid, []).append(chunk)

    @property
    def messages(self) -> dict[str, dict[int, list[Any]]]:
        """The messages by stream and partition, with lists placed as on one partition (the
        count of an input that declares none and is given only lists)."""
        return self.placed(None, {})

    def placed(self, plan: Any, counts: Mapping[str, int]) -> dict[str, dict[int, list[Any]]]:
        """The messages by stream and partition: each list placed by ``plan``'s partition rule
        for its stream's count in ``counts`` (a stream not in it, or no plan: one partition)."""
        from runtime.engine.wiring import partition_of

        out: dict[str, dict[int, list[Any]]] = {}
        for sid, chunks in self.given.items():
            merged = out.setdefault(sid, {})
            n = counts.get(sid, 1)
            rule = partition_of(plan, sid, n, 0) if plan is not None and n > 1 else None
            for chunk in chunks:
                if isinstance(chunk, dict):
                    for p, msgs in chunk.items():
                        merged.setdefault(p, []).extend(msgs)
                elif rule is None:
                    merged.setdefault(0, []).extend(chunk)
                else:
                    for m in chunk:
                        merged.setdefault(rule(m), []).append(m)
        return out

    def partitions(self) -> dict[str, int]:
        """The partition count of each input that declares none: its highest partition given
        as ``{partition: [...]}`` + 1 (1 when none is given)."""
        out: dict[str, int] = {}
        for sid, d in self.app.spec().inputs.items():
            if d.partitions is not None:
                continue
            given = [p for chunk in self.given.get(sid, []) if isinstance(chunk, dict)
                     for p in chunk]
            out[sid] = max(given) + 1 if given else 1
        return out


def _as_given(codec: StreamCodec, messages: list[Any]) -> bool:
    """Whether ``messages`` read back from their records as they are (equal): each column (a
    keyed stream's keys and values) of a type its serde, with no ``max_bytes``, gives back
    unchanged: str under a UTF-8 ``StringSerde`` that encodes every one, bytes under
    ``BytesSerde``. Each column is one pass in C: a str column joined (which fails on an item
    of another type) and the text checked as a whole, a bytes column by the set of its types."""
    if not messages:
        return True
    serde = codec.serde
    try:
        if not isinstance(serde, KVSerde):
            return _reads_back(serde, messages)
        # columns made by comprehensions: attribute reads there are specialized, and take
        # about half the time of ``map(attrgetter(...))``
        return (_reads_back(serde.key_serde, [m.key for m in messages])
                and _reads_back(serde.value_serde, [m.value for m in messages]))
    except (TypeError, AttributeError):  # an item of another type, or a message not a KV
        return False


def _reads_back(serde: Serde[Any], items: list[Any]) -> bool:
    if serde.max_bytes is not None:
        return False
    if type(serde) is BytesSerde:
        return set(map(type, items)) == {bytes}
    if type(serde) is StringSerde and serde.encoding == "utf-8":
        text = "".join(items)  # str subclasses join too: they read back as equal str
        if not text.isascii():  # (a flag of the str: no pass over its text)
            try:  # a lone surrogate does not encode
                text.encode()
            except UnicodeEncodeError:
                return False
        return True
    return False


def memory_store_factory(plan: Any) -> Any:
    """The stores of a run of ``plan`` in memory (``runtime.state.memory_store.MemoryStores``):
    each encodes and decodes what it holds as the job's LMDB store of it does, and is flushed
    at every commit. It is the run's state backend, and a ``store_factory(task, store)``.
    A store whose config sets no ``object.cache.size`` keeps every object it holds: its bytes
    are in memory anyway, and what a flush writes is still encoded (and checked) as in the job,
    but no entry is decoded again after the cache lets it go."""
    return MemoryStores(plan, cache_size=UNBOUNDED_CACHE)


def resolve_partitions(plan: Any) -> dict[str, int]:
    """Every stream's count: planned counts, and for outputs the system cannot tell, the widest
    input (docs/semantics.md rule 2(c), for intermediate streams, takes the widest input or output)."""
    counts = {sid: s.partitions for sid, s in plan.streams.items()}
    widest = max([n for sid, n in counts.items() if n and plan.streams[sid].kind == "input"] or [1])
    return {sid: (n if n else widest) for sid, n in counts.items()}


def memory_job(app: StreamApplication,
               inputs: Mapping[str, Mapping[int, Sequence[Any]]] | MemoryInputs,
               partitions: Mapping[str, int], config: Mapping[str, Any], *,
               checkpoints: MemoryCheckpoints | None = None,
               producer: Callable[[MemoryBroker], Any] = MemoryProducer,
               clock: Callable[[], int] | None = None,
               ) -> tuple[Any, MemoryBroker, Container]:
    """Plan ``app``, load its bounded inputs into in-memory streams (``MemoryInputs`` placed
    for the planned counts), and build its container."""
    plan = app.plan(partitions=partitions, config=config)
    counts = resolve_partitions(plan)
    broker = MemoryBroker()
    for sid, n in counts.items():
        broker.create(sid, n)
    consumer, metrics = MemoryConsumer(broker), Metrics()
    _codecs(plan, broker, consumer, metrics, clock)
    if isinstance(inputs, MemoryInputs):
        inputs = inputs.placed(plan, counts)
    for sid in plan.input_streams:
        for p, msgs in inputs.get(sid, {}).items():
            broker.extend(sid, p, msgs)
        broker.end(sid)
    job = build_job_model(plan, counts, plan.config.job.elasticity_factor)
    container = Container(job, job.tasks, consumer=consumer,
                          producer=producer(broker),
                          checkpoints=checkpoints if checkpoints is not None else MemoryCheckpoints(),
                          state=memory_store_factory(plan), config=plan.config, clock=clock,
                          metrics=metrics)
    return plan, broker, container


def _codecs(plan: Any, broker: MemoryBroker, consumer: MemoryConsumer, metrics: Metrics,
            clock: Callable[[], int] | None) -> None:
    """The codecs of the streams declared with a serde, each under its serde error policy (an
    input's in ``MemoryConsumer.given``: its stream holds the messages given), and the
    ``max_event_time_ahead`` checks of the inputs that declare one (in the codec of a stream
    of records); where one passes messages over under ``dead-letter``, the job's dead-letter
    stream, in memory."""
    from runtime.engine.event_time_ahead import ahead_rule
    from runtime.host.jobdir import dead_letter_stream

    def dead_letter(ssp: SSP, offset: int, record: Record, err: SerdeError) -> None:
        consumer.write_dead_letter(ssp, offset, record, err.reason, record=True)

    for sid, s in plan.streams.items():
        policy = serde_error_policy(plan.config, sid)
        rule = ahead_rule(sid, s.descriptor, policy, metrics=metrics, clock=clock)
        given = sid in plan.input_streams
        codec = _declared_codec(sid, s.descriptor.serde, policy, dead_letter=dead_letter,
                               metrics=metrics, ahead=None if given else rule)
        if codec is not None and given:
            consumer.given[sid] = codec
        elif codec is not None:
            broker.codecs[sid] = codec
        if rule is not None and (given or codec is None):
            consumer.ahead[sid] = rule
        elif codec is None:
            continue
        if policy == "dead-letter" and consumer.dead_letter is None:
            consumer.dead_letter = dead_letter_stream(plan.job_name)
            broker.create(consumer.dead_letter, 1)
