"""Traces through the OpenTelemetry SDK (the ``otel`` extra), chosen by ``tracing.*`` config.

Whether a job traces is decided once, where its container is made (``job_tracing``): off, no
tracer exists and a task's hand-out is the one it has without tracing, with no branch per
message. On, each task's ``add_batch`` is ``Tracing.traced``'s: one span per batch a task is
given (``samza.batch``: task, stream, partition, first and last offset, count), and one span
per sampled message of it (``samza.message``, a child of its batch's span).

A message is sampled by its input position alone (``sampled``): a 64-bit mix of the stream's
CRC-32, the partition and the offset, below ``tracing.sample.ratio`` of 2**64. So the same run
samples the same messages, and a ratio of 0.01 samples one message in a hundred on average.

``tracing.exporter``: ``otlp`` sends spans in batches to the OTLP/HTTP endpoint
``tracing.otlp.endpoint`` (a collector); ``memory`` keeps them in the SDK's
``InMemorySpanExporter`` of the process (``memory_exporter()``, for tests); ``none`` makes spans and drops them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import Any

from samza_dsl.config import config_value
from samza_dsl.errors import ConfigError

__all__ = ["EXPORTERS", "Tracing", "job_tracing", "memory_exporter", "sampled", "traceparent"]

EXPORTERS = ("otlp", "memory", "none")

_M64 = (1 << 64) - 1


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


def traceparent(span: Any) -> bytes:
    """The W3C ``traceparent`` header value of ``span`` (version 00, sampled)."""
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01".encode()


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

    def __init__(self, config: Mapping[str, Any], *, service: str) -> None:
        sdk_trace = _import_sdk("tracing.enabled=true")
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        self.ratio = float(config_value(config, "tracing.sample.ratio"))
        self.bound = threshold(self.ratio)
        exporter = str(config_value(config, "tracing.exporter"))
        self.provider = sdk_trace.TracerProvider(
            resource=Resource.create({"service.name": service}))
        self.memory: Any = None
        if exporter == "memory":
            self.memory = memory_exporter()
            self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        elif exporter == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            endpoint = str(config_value(config, "tracing.otlp.endpoint"))
            self.provider.add_span_processor(BatchSpanProcessor(
                OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")))
        self.tracer = self.provider.get_tracer("samza-dsl")

    def traced(self, task: str, add_batch: Callable[[Any, int, list[Any]], None]
               ) -> Callable[[Any, int, list[Any]], None]:
        """``add_batch`` of task ``task`` that makes the spans of each batch it is given."""
        tracer = self.tracer
        bound = self.bound
        from opentelemetry import trace

        def add(ssp: Any, first: int, payloads: list[Any]) -> None:
            n = len(payloads)
            stream, partition = ssp.stream_id, ssp.partition
            span = tracer.start_span("samza.batch", attributes={
                "samza.task": task, "samza.stream": stream, "samza.partition": partition,
                "samza.offset.first": first, "samza.offset.last": first + n - 1,
                "samza.count": n})
            try:
                if bound:
                    ctx = trace.set_span_in_context(span)
                    for off in range(first, first + n):
                        if sampled(stream, partition, off, bound):
                            tracer.start_span("samza.message", context=ctx, attributes={
                                "samza.task": task, "samza.stream": stream,
                                "samza.partition": partition, "samza.offset": off}).end()
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


def job_tracing(config: Mapping[str, Any], *, service: str) -> Tracing | None:
    """The tracing ``tracing.*`` asks for, or None (off)."""
    if not config_value(config, "tracing.enabled"):
        return None
    return Tracing(config, service=service)
