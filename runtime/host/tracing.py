"""Traces through the OpenTelemetry SDK (the ``otel`` extra), chosen by ``tracing.*`` config.

Whether a job traces is decided once, where its container is made (``job_tracing``): off, no
tracer exists and a task's hand-out is the one it has without tracing, with no branch per
message. On, each task's ``add_batch`` is ``Tracing.traced``'s: one span per batch a task is
given (``samza.batch``: task, stream, partition, first and last offset, count), and one span
per sampled message of it (``samza.message``, linked to its batch's span).

A message is sampled by its input position alone (``sampled``): a 64-bit mix of the stream's
CRC-32, the partition and the offset, below ``tracing.sample.ratio`` of 2**64. So the same run
samples the same messages, and a ratio of 0.01 samples one message in a hundred on average.

A sampled message's span has ids made from its position (``message_ids``), so it starts a
trace of its own. The records it causes carry its span's W3C ``traceparent`` header
(``trace_of``, written through the task's ``runtime.engine.origins.Stamps``): into intermediate
streams (``partition_by``) beside their origin, and into outputs. A record read with a sampled
``traceparent`` (``note``, given each batch by the stream's codec before it is decoded) is
traced, whatever its position, as a child of it: so a trace goes on through every hop, and into
a consumer of an output. A record of an intermediate stream with no header (written by a run
without tracing) whose origin names a sampled message is a child of that message's span.

The call of a sampled message by an async operator (``traced_process``), the remote-table
calls its function makes (``traced_track``) and its ``join_table`` lookup on a remote table
(``traced_lookup``) are child spans of the message's span. Each is wired into the task when it
is built (``wire``, ``RemoteTableClient``'s ``track``): off, the operators and tables are as
they are without tracing.

``tracing.exporter``: ``otlp`` sends spans in batches to the OTLP/HTTP endpoint
``tracing.otlp.endpoint`` (a collector); ``memory`` keeps them in the process's
``InMemorySpanExporter`` (``memory_exporter()``, for tests); ``none`` makes spans and drops
them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import Any

from samza_dsl.errors import ConfigError
from samza_dsl.jobconfig import JobConfig, TracingConfig

__all__ = ["EXPORTERS", "TRACEPARENT", "Tracing", "job_tracing", "memory_exporter",
           "parse_traceparent", "sampled", "traceparent"]

EXPORTERS = ("otlp", "memory", "none")

_M64 = (1 << 64) - 1
#: of a batch, (stream, partition, offset) of the origin of its record i, or None
Origins = Callable[[Any], Callable[[int], tuple[str, int, int] | None] | None]
_ROOT: Any = {}  # an empty context: the span starts a trace

TRACEPARENT = "traceparent"
#: the sampled messages a container remembers the trace of, for the records they write and
#: the records read that carried a ``traceparent``: the oldest are let go past this many
REMEMBERED = 1 << 16


def _mix(x: int) -> int:
    """splitmix64's finaliser: every bit of ``x`` moves every bit of the result."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _M64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _M64
    return x ^ (x >> 31)


def threshold(ratio: float) -> int:
    """The bound ``sampled`` compares with for ``ratio`` (0 to 1)."""
    return min(1 << 64, int(ratio * (1 << 64)))


def sampled(stream: str, partition: int, offset: int, bound: int) -> bool:
    """Whether the message at ``offset`` of ``stream``'s ``partition`` is sampled, with
    ``bound`` from ``threshold``: the same answer in every run and process."""
    seed = zlib.crc32(stream.encode()) << 32 ^ partition << 48 ^ offset
    return _mix(seed & _M64) < bound


def message_ids(stream: str, partition: int, offset: int) -> tuple[int, int]:
    """(trace id, span id) of the span of the sampled message at ``offset`` of ``stream``'s
    ``partition``: the same in every process, so a task reading a record the message caused
    downstream (its origin names the message) continues its trace without a header."""
    seed = zlib.crc32(stream.encode()) << 32 ^ partition << 48 ^ offset
    a, b = _mix(seed ^ 0x5A5A5A5A5A5A5A5A), _mix(seed ^ 0xA5A5A5A5A5A5A5A5)
    return (a << 64 | b) or 1, _mix(a ^ b) or 1


class _Ids:
    """The SDK's ids: random, but for the next span where ``next`` is set (a message's)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        self.random = RandomIdGenerator()
        self.next: tuple[int, int] | None = None

    def generate_trace_id(self) -> int:
        if self.next is not None:
            return self.next[0]
        return self.random.generate_trace_id()

    def generate_span_id(self) -> int:
        got, self.next = self.next, None
        return self.random.generate_span_id() if got is None else got[1]

    def is_trace_id_random(self) -> bool:
        return False


def traceparent(span: Any) -> bytes:
    """The W3C ``traceparent`` header value of ``span`` (version 00, sampled)."""
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01".encode()


def parse_traceparent(value: bytes) -> tuple[int, int] | None:
    """(trace id, span id) of a W3C ``traceparent`` header value that is sampled (flags
    ``01``), or None: not sampled, or not a traceparent (then it is ignored, as W3C asks)."""
    parts = value.split(b"-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or parts[0] == b"ff":
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3][:2], 16)
    except ValueError:
        return None
    if not trace_id or not span_id or not flags & 1:
        return None
    return trace_id, span_id


def _remember(d: dict[Any, Any], key: Any, value: Any) -> None:
    d[key] = value
    if len(d) > REMEMBERED:
        del d[next(iter(d))]


def _import_sdk(key: str) -> Any:
    try:
        from opentelemetry.sdk import trace as sdk_trace
    except ImportError as e:
        raise ConfigError(f"{key}: the OpenTelemetry SDK is not installed; install the otel "
                          f"extra (pip install 'samza-dsl[otel]') or set "
                          f"tracing.enabled=false") from e
    return sdk_trace


class Tracing:
    """A container's tracer and sampling bound, from the job's config (``job_tracing``)."""

    def __init__(self, config: TracingConfig, *, service: str, origins: Origins) -> None:
        sdk_trace = _import_sdk("tracing.enabled=true")
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        self.ratio = config.sample_ratio
        self.bound = threshold(self.ratio)
        exporter = config.exporter
        self.ids = _Ids()
        #: (stream, partition, offset) of the origin of a batch's record i (intermediate streams)
        self.origins = origins
        self.provider = sdk_trace.TracerProvider(
            resource=Resource.create({"service.name": service}), id_generator=self.ids)
        self.memory: Any = None
        if exporter == "memory":
            self.memory = memory_exporter()
            self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        elif exporter == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            endpoint = config.otlp_endpoint
            self.provider.add_span_processor(BatchSpanProcessor(
                OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")))
        self.tracer = self.provider.get_tracer("samza-dsl")
        #: (stream, partition, offset) -> the ``traceparent`` header of a sampled message's span
        #: (``trace_of``), for the records it writes
        self.live: dict[tuple[str, int, int], tuple[tuple[str, bytes], Any]] = {}
        #: (stream, partition, offset) -> (trace id, span id) of the sampled ``traceparent``
        #: a record read carried (``note``), until its task is given it
        self.incoming: dict[tuple[str, int, int], tuple[int, int]] = {}

    def trace_of(self, stream: str, partition: int, offset: int) -> tuple[str, bytes] | None:
        """The ``traceparent`` header for a record written for the message at ``offset`` of
        ``stream``'s ``partition``: its span's, where it is sampled; else None."""
        got = self.live.get((stream, partition, offset))
        return None if got is None else got[0]

    def child(self, position: tuple[Any, int] | None, name: str,
              attributes: Mapping[str, Any]) -> Any:
        """A span started now as a child of the span of the sampled message at ``position``
        (``(ssp, offset)``), or None: no message, or one not sampled."""
        if position is None:
            return None
        ssp, offset = position
        got = self.live.get((ssp.stream_id, ssp.partition, offset))
        if got is None:
            return None
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan

        return self.tracer.start_span(name, context=trace.set_span_in_context(
            NonRecordingSpan(got[1])), attributes=attributes)

    def wire(self, stamps: Any, operators: Mapping[str, Any]) -> None:
        """A task's records of sampled messages carry their trace (``stamps``, the task's
        ``runtime.engine.origins.Stamps``), and its async operators' calls and its
        ``join_table`` lookups on remote tables are spans (operators built, not yet started)."""
        stamps.trace = self.trace_of
        for op in operators.values():
            if op.opcode == "async_flat_map":
                op.process = self.traced_process(op.process, op.op_id, stamps.position)
            elif op.opcode == "join_table":
                op.lookup = self.traced_lookup(op.lookup, op.op_id, op.table_id,
                                               stamps.position)

    def traced_process(self, process: Callable[[Any], Any], op_id: str,
                       position: Callable[[], tuple[Any, int] | None]) -> Callable[[Any], Any]:
        """An async operator's ``process``: the call of a sampled message's is a child span of
        the message's (``samza.async``), from the call until its outputs are ready."""
        child = self.child
        attrs = {"samza.operator": op_id}

        def call(message: Any) -> Any:
            span = child(position(), "samza.async", attrs)
            result = process(message)
            return result if span is None else _ended_when_done(span, result)
        return call

    def traced_track(self, track: Callable[[Any], None],
                     position: Callable[[], tuple[Any, int] | None]) -> Callable[[Any], None]:
        """A remote table's ``track`` of the calls user functions make: the call of a sampled
        message's is a child span of the message's (``samza.remote``: table, call, key), until
        the call is done."""
        child = self.child

        def tracked(call: Any) -> None:
            track(call)
            span = child(position(), "samza.remote", {
                "samza.table": str(call.table), "samza.call": str(call.what),
                "samza.key": repr(call.key)[:200]})
            if span is not None:
                call.task.add_done_callback(lambda _: span.end())
        return tracked

    def traced_lookup(self, lookup: Callable[[Any, Any], Any], op_id: str, table: str,
                      position: Callable[[], tuple[Any, int] | None]
                      ) -> Callable[[Any, Any], Any]:
        """A ``join_table`` operator's ``lookup`` of a message on a remote table: a sampled
        message's is a child span of the message's (``samza.remote``: table, call
        ``join_table``, operator, key, and ``samza.cache`` ``hit`` where the table's cache
        answered at once, else ``miss``), until its outputs are ready."""
        child = self.child
        fixed = {"samza.table": str(table), "samza.call": "join_table", "samza.operator": op_id}

        def traced(message: Any, key: Any) -> Any:
            span = child(position(), "samza.remote", {**fixed, "samza.key": repr(key)[:200]})
            if span is None:
                return lookup(message, key)
            try:
                result = lookup(message, key)
            except BaseException as exc:
                span.record_exception(exc)
                span.end()
                raise
            if result.__class__ is list:  # the cache answered: done already
                span.set_attribute("samza.cache", "hit")
                span.end()
                return result
            span.set_attribute("samza.cache", "miss")
            return _ended_when_done(span, result)
        return traced

    def note(self, ssp: Any, first: int, records: Any) -> None:
        """A batch of records read (``(key, value, headers)`` from ``first``): those carrying a
        sampled ``traceparent`` are traced as its children when their task is given them."""
        stream, partition = ssp.stream_id, ssp.partition
        for i, r in enumerate(records):
            h = r[2]
            if h and h.__class__ is not int:
                for name, value in h:
                    if name == TRACEPARENT:
                        got = parse_traceparent(value)
                        if got is not None:
                            _remember(self.incoming, (stream, partition, first + i), got)

    def traced(self, task: str, add_batch: Callable[[Any, int, list[Any]], None],
               controls: frozenset[type] = frozenset()
               ) -> Callable[[Any, int, list[Any]], None]:
        """``add_batch`` of task ``task`` that makes the spans of each batch it is given.
        ``controls``: the types of the records that are no message (an input's end, a
        watermark): they are never sampled."""
        tracer = self.tracer
        bound = self.bound
        ids = self.ids
        origins = self.origins
        live, incoming = self.live, self.incoming
        from opentelemetry import trace
        from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

        flags = TraceFlags(TraceFlags.SAMPLED)

        def add(ssp: Any, first: int, payloads: list[Any]) -> None:
            n = len(payloads)
            stream, partition = ssp.stream_id, ssp.partition
            span = tracer.start_span("samza.batch", attributes={
                "samza.task": task, "samza.stream": stream, "samza.partition": partition,
                "samza.offset.first": first, "samza.offset.last": first + n - 1,
                "samza.count": n})
            try:
                if bound or incoming:
                    links = [Link(span.get_span_context())]
                    origin = origins(payloads)
                    # ``sampled`` of each message, with its stream's part computed once
                    seed = zlib.crc32(stream.encode()) << 32 ^ partition << 48
                    for i in range(n):
                        if type(payloads[i]) in controls:
                            continue
                        off = first + i
                        up = incoming.pop((stream, partition, off), None) if incoming else None
                        if up is None and origin is not None:
                            came = origin(i)
                            if came is not None and sampled(*came, bound):
                                # a record of a sampled input message of the stage before,
                                # written without a traceparent: its trace by its origin
                                up = message_ids(*came)
                        if up is None and _mix((seed ^ off) & _M64) >= bound:
                            continue
                        attrs = {"samza.task": task, "samza.stream": stream,
                                 "samza.partition": partition, "samza.offset": off}
                        if up is not None:
                            # a record a sampled message caused upstream: a child of that
                            # message's span, in its trace
                            parent = trace.set_span_in_context(NonRecordingSpan(SpanContext(
                                up[0], up[1], True, flags)))
                            span1 = tracer.start_span("samza.message", context=parent,
                                                      links=links, attributes=attrs)
                        else:
                            ids.next = message_ids(stream, partition, off)
                            span1 = tracer.start_span("samza.message", context=_ROOT,
                                                      links=links, attributes=attrs)
                        _remember(live, (stream, partition, off), ((TRACEPARENT, traceparent(span1)),
                                              span1.get_span_context()))
                        span1.end()
                add_batch(ssp, first, payloads)
            finally:
                span.end()
        return add

    def close(self) -> None:
        """Send what is left and stop the exporter (the process's in-memory one stays)."""
        if self.memory is not None:
            self.provider.force_flush()
        else:
            self.provider.shutdown()


_MEMORY: list[Any] = []


def memory_exporter() -> Any:
    """The process's ``InMemorySpanExporter``, which ``tracing.exporter=memory`` sends to
    (``get_finished_spans()``, ``clear()``)."""
    if not _MEMORY:
        _import_sdk("tracing.exporter=memory")
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        _MEMORY.append(InMemorySpanExporter())
    return _MEMORY[0]


def job_tracing(config: JobConfig, *, service: str, origins: Origins) -> Tracing | None:
    """The tracing ``tracing.*`` asks for, or None (off). ``origins``: of a batch, a function
    of record i giving (stream, partition, offset) of its origin, or None (no origins)."""
    if not config.tracing.enabled:
        return None
    return Tracing(config.tracing, service=service, origins=origins)


class OtelMetrics:
    """The ``otel`` metrics reporter: the numbers of the container's registry, as
    ``metrics.samples()`` gives them, sent by the SDK to ``tracing.otlp.endpoint`` (OTLP/HTTP)
    every ``metrics.reporter.interval.ms``. Each (group, name) is an instrument
    ``samza.<group>.<name>`` (a gauge where ``gauges`` names it, else a counter), made when it
    is first seen (``refresh``, at each report), with each sample's labels as attributes."""

    def __init__(self, samples: Callable[[], Any], gauges: Callable[[str, str], bool],
                 config: JobConfig, labels: Mapping[str, str], interval_ms: int) -> None:
        _import_sdk("metrics.reporters=otel")
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        endpoint = config.tracing.otlp_endpoint.rstrip("/")
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=endpoint + "/v1/metrics"),
            export_interval_millis=interval_ms)
        self.provider = MeterProvider(
            metric_readers=[reader],
            resource=Resource.create({"service.name": labels.get("job", "samza-dsl")}))
        self.meter = self.provider.get_meter("samza-dsl")
        self.samples = samples
        self.gauges = gauges
        self.labels = dict(labels)
        self.latest: dict[tuple[str, str], list[tuple[dict[str, str], float]]] = {}

    def refresh(self) -> None:
        """Take the registry's samples now; an instrument for each (group, name) new in them."""
        from opentelemetry.metrics import CallbackOptions, Observation

        rows: dict[tuple[str, str], list[tuple[dict[str, str], float]]] = {}
        for group, name, labels, value in self.samples():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            rows.setdefault((group, name), []).append(({**self.labels, **labels}, float(value)))
        new = [key for key in rows if key not in self.latest]
        self.latest.update(rows)
        for key in new:
            def observe(_: CallbackOptions, key: tuple[str, str] = key) -> list[Observation]:
                return [Observation(v, attrs) for attrs, v in self.latest.get(key, ())]
            group, name = key
            make = self.meter.create_observable_gauge if self.gauges(group, name) else \
                self.meter.create_observable_counter
            make(f"samza.{group}.{name}", callbacks=[observe])

    def close(self) -> None:
        """The last numbers, sent; the exporter stopped."""
        self.refresh()
        self.provider.force_flush()
        self.provider.shutdown()


async def _ended_when_done(span: Any, result: Any) -> Any:
    """``result`` awaited, with ``span`` ended when it is done (its exception recorded)."""
    try:
        return await result
    except BaseException as exc:
        span.record_exception(exc)
        raise
    finally:
        span.end()
