"""What ``samza-dsl dump`` prints: any stream of a job, as JSON Lines, on every system whose
streams outlive a run (each system's ``JobSystem.dump_lines`` gives the sources).

Every stream of the job can be dumped: inputs, outputs and intermediate streams (decoded with
their serdes), the stores' changelogs (decoded with the store's serdes; a tombstone has value
``null``) and the dead-letter stream ``<job>-dead-letter`` (each raw record with the error and
where it came from). A keyed message prints as ``{"key": ..., "value": ...}``.

Records are read and decoded a batch at a time and printed as they come, so memory stays flat
whatever the stream's size. ``--limit N`` prints the last N messages (partition by partition,
as a whole dump does) and reads the stream backwards from its end, in chunks, until it has them:
it costs what N messages cost, not what the stream does.

A job on Kafka dumps the same streams from its topics (``runtime.kafka.job_system``), a fetch at
a time, with ``--limit N`` reading only the end of the partitions it needs; a stream whose topic
does not exist is an error that says how the topic comes to be.

A record that does not decode is not printed; a warning on standard error names its stream,
partition and offset. ``--offsets`` prints each message with its partition and offset: where
compaction kept only the latest entry of each key of a changelog, the offsets show which.
"""

from __future__ import annotations

import json
import logging
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from runtime.engine.codec import ERROR_HEADER, SOURCE_HEADER, Skipped, StoredRecord, StreamCodec
from runtime.engine.job import SSP
from runtime.engine.origins import origin_of_headers, origin_source
from runtime.engine.records import is_control
from runtime.host.jobdir import metrics_stream
from runtime.state.codec import state_codec, store_codecs
from samza_dsl.config import did_you_mean
from samza_dsl.errors import SamzaError
from samza_dsl.kv import KV

__all__ = ["DumpSource", "job_dump_sources", "dump_source", "dump_lines"]

log = logging.getLogger("samza_dsl.dump")

_READ = 4096  # records read per call
_json = msgspec.json.Encoder(enc_hook=repr)

#: (partition, offsets of the records, records) -> [(offset, printable message), ...]
Decode = Callable[[SSP, Sequence[int], Sequence[StoredRecord]], list[tuple[int, Any]]]


def _runs(offsets: Sequence[int]) -> Iterator[tuple[int, int]]:
    """``(i, j)``: the slices of ``offsets`` that are consecutive offsets."""
    if type(offsets) is range:
        yield 0, len(offsets)
        return
    i = 0
    n = len(offsets)
    while i < n:
        j = i + 1
        while j < n and offsets[j] == offsets[j - 1] + 1:
            j += 1
        yield i, j
        i = j


@dataclass(frozen=True)
class DumpSource:
    """A stream of the job in a log: where it is and how its records become printable objects."""

    name: str
    #: a ``runtime.local.log.LocalLog``, or a ``runtime.kafka.load_dump.TopicReader`` (which
    #: reads the same way)
    log: Any
    physical: str
    decode: Decode


def _text(data: bytes | None) -> Any:
    """Raw bytes as text when they are UTF-8, else as ``{"base64": ...}``."""
    if data is None:
        return None
    try:
        return bytes(data).decode()
    except UnicodeDecodeError:
        import base64
        return {"base64": base64.b64encode(bytes(data)).decode()}


def _stream_decoder(codec: StreamCodec) -> Decode:
    def decode(ssp: SSP, offsets: Sequence[int], records: Sequence[StoredRecord]
               ) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        for i, j in _runs(offsets):
            ms = codec.decode_batch(ssp, offsets[i], records[i:j], 0)
            out += [(o, {"key": m.key, "value": m.value} if type(m) is KV else m)
                    for o, m in zip(offsets[i:j], ms, strict=True)
                    if not is_control(m) and type(m) is not Skipped]
        return out
    return decode


def _dead_letter_decode(ssp: SSP, offsets: Sequence[int], records: Sequence[StoredRecord]
                        ) -> list[tuple[int, Any]]:
    out = []
    for o, (k, v, headers) in zip(offsets, records, strict=True):
        h = {name: bytes(value).decode(errors="replace")
             for name, value in (headers if isinstance(headers, tuple) else ())}
        letter = {"source": h.get(SOURCE_HEADER), "error": h.get(ERROR_HEADER),
                  "key": _text(k), "value": _text(v)}
        origin = origin_of_headers(headers)
        if origin is not None:  # a record of an intermediate stream: the input message's place
            letter["origin"] = origin_source(origin)
        out.append((o, letter))
    return out


def _metrics_decode(ssp: SSP, offsets: Sequence[int], records: Sequence[StoredRecord]
                    ) -> list[tuple[int, Any]]:
    """The ``<job>-metrics`` stream: each record a metrics snapshot as JSON (data, never code)."""
    out = []
    for o, (_, v, _) in zip(offsets, records, strict=True):
        try:
            out.append((o, json.loads(v) if v is not None else None))
        except ValueError:
            out.append((o, {"value": _text(v)}))
    return out


def _changelog_decoder(name: str, key_decode: Callable[[bytes], Any],
                       value_decode: Callable[[bytes], Any]) -> Decode:
    def decode(ssp: SSP, offsets: Sequence[int], records: Sequence[StoredRecord]
               ) -> list[tuple[int, Any]]:
        out = []
        for o, (k, v, _) in zip(offsets, records, strict=True):
            try:
                key = key_decode(k) if k is not None else None
                value = value_decode(v) if v is not None else None
            except Exception as exc:
                log.warning("changelog %s partition %d offset %d does not decode with the "
                            "store's serdes (%s: %s): not printed", name, ssp.partition,
                            o, type(exc).__name__, exc)
                continue
            out.append((o, {"key": key, "value": value}))
        return out
    return decode


def job_dump_sources(job_name: str, plan: Any, codecs: Mapping[str, StreamCodec],
                     stream_at: Callable[[str], tuple[Any, str]], main: Any, dead_letter: str,
                     changelogs: Mapping[str, tuple[Any, str]]) -> dict[str, DumpSource]:
    """Every stream of a job that can be dumped, by the name ``dump`` takes: its streams (each
    decoded by its codec in ``codecs``, read where ``stream_at(stream id)`` says: (reader,
    physical name)), the dead-letter and metrics streams (read by ``main``), and each store's
    changelog (``changelogs``: store -> (reader, physical name)), decoded by the store's serdes."""
    out: dict[str, DumpSource] = {}
    for sid, codec in codecs.items():
        # a dump goes past a record that does not decode, with a warning, whatever the policy
        quiet = StreamCodec(sid, codec.serde, policy="skip")
        reader, physical = stream_at(sid)
        out[sid] = DumpSource(sid, reader, physical, _stream_decoder(quiet))
    out[dead_letter] = DumpSource(dead_letter, main, dead_letter, _dead_letter_decode)
    metrics = metrics_stream(job_name)
    out[metrics] = DumpSource(metrics, main, metrics, _metrics_decode)
    for name, (reader, stream) in changelogs.items():
        store = plan.stores[name]
        if store.table is not None:
            kd, vd = _table_decoders(plan, name)
        else:
            _, kd, _, vd = state_codec(plan.app.types, f"{store.kind} state {name!r}")
        out[stream] = DumpSource(stream, reader, stream, _changelog_decoder(stream, kd, vd))
    return out


def _table_decoders(plan: Any, name: str) -> tuple[Callable[[bytes], Any],
                                                   Callable[[bytes], Any]]:
    """A table's key and value decoders for its changelog: a table with a ttl stores each
    value after its write time (``runtime.state.ttl``), which the dump leaves out."""
    _, kd, _, vd = store_codecs(plan, name)
    if plan.stores[name].table.ttl_ms is None:
        return kd, vd
    return kd, lambda data: vd(data)[1]


def dump_source(sources: Mapping[str, DumpSource], stream: str, job_name: str) -> DumpSource:
    """The source of ``stream``; an error listing the job's streams when it has none of that
    name."""
    source = sources.get(stream)
    if source is None:
        raise SamzaError(f"{stream!r} is not a stream of job {job_name!r}"
                         f"{did_you_mean(stream, sources)}; its streams: "
                         f"{', '.join(sorted(sources))}")
    return source


def _partitions(source: DumpSource) -> int:
    n = source.log.partitions(source.physical)
    return 0 if n is None else n


def _forward(source: DumpSource, partition: int) -> Iterator[list[tuple[int, Any]]]:
    """The partition's messages with their offsets, a batch at a time, from its start."""
    pos = 0
    ssp = SSP(source.name, partition)
    while True:
        offsets, records = source.log.read_with_offsets(source.physical, partition, pos, _READ)
        if not records:
            return
        yield source.decode(ssp, offsets, records)
        pos = offsets[-1] + 1


def _last(source: DumpSource, partition: int, n: int) -> list[tuple[int, Any]]:
    """The partition's last ``n`` messages with their offsets (fewer if it has fewer), reading
    back from its end over spans of offsets that double: control records and undecodable ones
    take offsets too, and compaction leaves offsets without records."""
    ssp = SSP(source.name, partition)
    end = source.log.end_offset(source.physical, partition)
    got: list[tuple[int, Any]] = []
    hi, span = end, max(n, 64)
    while len(got) < n and hi > 0:
        lo = max(0, hi - span)
        window: list[tuple[int, Any]] = []
        pos = lo
        while pos < hi:  # the messages at offsets [lo, hi), a read at a time
            offsets, records = source.log.read_with_offsets(source.physical, partition, pos,
                                                            min(_READ, hi - pos))
            if not records or offsets[0] >= hi:
                break
            keep = bisect_left(offsets, hi)
            window += source.decode(ssp, offsets[:keep], records[:keep])
            pos = offsets[keep - 1] + 1
        got = window + got
        hi, span = lo, min(span * 2, 1 << 22)
    return got[-n:] if n else []


def _line(partition: int, offset: int, m: Any, offsets: bool) -> bytes:
    if not offsets:
        return _json.encode(m)
    return _json.encode({"partition": partition, "offset": offset, "message": m})


def dump_lines(source: DumpSource, limit: int | None = None, *,
               offsets: bool = False) -> Iterator[bytes]:
    """JSON lines of a stream's messages, partition by partition; with ``limit``, the last
    ``limit`` of them. With ``offsets``, each line is ``{"partition": p, "offset": o,
    "message": m}``: a compacted changelog shows the offsets its records keep."""
    parts = _partitions(source)
    if limit is None:
        for p in range(parts):
            for batch in _forward(source, p):
                for o, m in batch:
                    yield _line(p, o, m, offsets)
        return
    if limit < 1:
        raise SamzaError(f"--limit takes a number of messages >= 1, got {limit}")
    tail: list[tuple[int, list[tuple[int, Any]]]] = []
    need = limit
    for p in reversed(range(parts)):
        got = _last(source, p, need)
        tail.append((p, got))
        need -= len(got)
        if need <= 0:
            break
    for p, got in reversed(tail):
        for o, m in got:
            yield _line(p, o, m, offsets)
