"""Records into a job's outputs that carry the W3C ``traceparent`` header of the sampled message
that made them (docs/tracing.md), so that a consumer of the output continues its trace. Only a
traced job's tasks write through these (``runtime.engine.origins.StampingProducer``, its
``traced`` streams); ``trace()`` gives the headers for a record written now, or None."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["RecordLists", "tag_last", "traced_sender", "traced_sink"]

Trace = Callable[[], tuple[tuple[str, bytes], ...] | None]


class RecordLists:
    """A producer that keeps its streams in memory (``runtime.memory``), with no buffer to
    write out: a traced task's records carry their ``traceparent`` there too, added in place
    (``tag_last``), in the streams that hold records (``holds_records``)."""

    def holds_records(self, stream_id: str) -> bool:
        """Whether ``stream_id`` holds records (with headers), not objects."""
        raise NotImplementedError

    def buffer(self, stream_id: str, partition: int) -> list[Any]:
        """One partition's records, the last written last."""
        raise NotImplementedError


def tag_last(base: Any, stream_id: str, partition: int,
             headers: tuple[tuple[str, bytes], ...] | None) -> None:
    """The record ``base`` buffered last for ``stream_id``'s ``partition`` carries ``headers``
    (None: as it is), where it is a message's (a control record keeps its own)."""
    if headers is not None:
        buf = base.buffer(stream_id, partition)
        r = buf[-1]
        if r[2] is None:
            buf[-1] = (r[0], r[1], headers)


def traced_sink(sink: Any, trace: Trace, src: Any) -> Any:
    """``sink`` (a ``StreamSink`` of records) whose appends add ``trace()``'s headers; its batch
    runs set the cursor ``src`` at each message, which ``trace`` reads."""

    def tagging(append: Callable[[Any], None]) -> Callable[[Any], None]:
        def add(r: Any) -> None:
            h = trace()
            append(r if h is None else (r[0], r[1], h))
        return add
    return type(sink)([tagging(a) for a in sink.append], sink.key, sink.value, sink.encode,
                      src, lambda _: None, list(sink.append), None)


def traced_sender(base: Any, stream_id: str, send: Callable[[int, Any], None],
                  trace: Trace) -> Callable[[int, Any], None]:
    """``send`` of ``stream_id`` whose records carry ``trace()``'s headers."""

    def tagged(partition: int, m: Any) -> None:
        send(partition, m)
        tag_last(base, stream_id, partition, trace())
    return tagged
