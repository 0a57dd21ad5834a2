"""Messages to records and back, for the systems that carry bytes (the embedded local log, Kafka),
and the serde error policies.

A record is ``(key, value, headers)``, as in Kafka. A keyed stream (``KVSerde``) writes a ``KV``'s
key and value with the key and value serdes; any other stream writes the message with its serde,
and a ``KV`` sent to it with its key as the record key (``default_key_bytes``) and its value as the
value. Streams declared without a serde use JSON on inputs and outputs, and ``SafeSerde`` on
intermediate streams: MessagePack that gives back tuples, ``KV``, datetimes and the types the
application declared (``app.declare_types``), and whose decoding never runs code, so whoever
can write to an intermediate stream can at worst send a record that fails to decode. A message
it cannot write fails the operator that sent it, with an error naming the stream and the type.

Control messages (end-of-stream, watermarks) are records with a ``samza.control`` header, no key
and an empty value. Each run of a job stamps its control records with its generation: a restarted job skips
the control records an earlier run left in an intermediate stream, as its upstream tasks send
their own again. Exactly once, an earlier run's watermark from a task that still writes the
stream counts where it stands (``keep_earlier_watermarks``): it was committed with the checkpoint
of the outputs before it, so its task, which resumes from that checkpoint, sends nothing before
it again, and which messages after it are behind it is as in one run.

A record that fails to deserialize follows ``streams.<id>.samza.serde.error``: ``fail`` (the
default) stops the job with an error naming the stream, partition and offset; ``skip`` logs it and
counts it in the ``serde-errors-skipped`` metric; ``dead-letter`` also writes the raw record, with
the error and its origin in headers, to the job's ``<job>-dead-letter`` stream.

>>> from samza_dsl.serdes import StringSerde, JsonSerde
>>> codec = StreamCodec("views", KVSerde(StringSerde(), JsonSerde()))
>>> record = codec.encode(KV("u1", {"page": "/"}))
>>> record
(b'u1', b'{"page":"/"}', None)
>>> codec.decode_batch(SSP("views", 0), 0, [record, control_record(EndOfStream("t0"), 1)], 1)
[KV(key='u1', value={'page': '/'}), EndOfStream(producer='t0')]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any, cast

import msgspec

from runtime.engine.job import SSP
from runtime.engine.origins import (
    ORIGIN_HEADER,
    OriginList,
    OriginNames,
    origin_header,
    origin_of_headers,
    origin_text,
    origins_of_records,
)
from runtime.engine.records import EndOfStream, Skipped, Watermark, is_control
from runtime.engine.serde_util import default_key_bytes
from runtime.engine.systems import ProducerCounts, StreamSink
from samza_dsl.errors import SerdeError
from samza_dsl.jobconfig import JobConfig
from samza_dsl.kv import KV
from samza_dsl.serdes import (
    BytesSerde,
    JsonSerde,
    KVSerde,
    MsgpackSerde,
    NoOpSerde,
    SafeSerde,
    Serde,
    StringSerde,
)

__all__ = ["Record", "StoredRecord", "CONTROL_HEADER", "ERROR_HEADER", "SOURCE_HEADER", "Skipped", "StreamCodec",
           "control_record", "keep_earlier_watermarks", "stream_serde", "serde_error_policy",
           "fast_serializer", "fast_deserializer", "BufferedProducer"]

Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...] | None]
#: a record as a log read gives it: of an intermediate stream in the embedded log, its headers
#: may be an int, the record's origin in its compact form (``runtime.engine.origins``)
StoredRecord = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...] | int | None]
CONTROL_HEADER = "samza.control"
ERROR_HEADER = "samza.error"
SOURCE_HEADER = "samza.source"

log = logging.getLogger("samza_dsl.serde")

_control_encoder = msgspec.msgpack.Encoder()
_control_decoder = msgspec.msgpack.Decoder(tuple[int, EndOfStream | Watermark])


_STALE = Skipped("control record of an earlier run")
#: a record that does not decode, until its task decides on it (``StreamCodec.hold``)
_HELD = Skipped("a record that does not decode, held for its task")


def control_record(message: EndOfStream | Watermark, generation: int) -> Record:
    """The record of a control message sent by the run ``generation`` of a job."""
    # an empty value, not None: Kafka clients refuse a record with neither key nor value
    return (None, b"", ((CONTROL_HEADER, _control_encoder.encode((generation, message))),))


def keep_earlier_watermarks(codecs: Mapping[str, StreamCodec],
                            producers: Mapping[str, frozenset[str]]) -> None:
    """Exactly once: the codecs of intermediate streams take the watermarks an earlier run's
    task left in them, where that task (by name) writes the stream in this run too
    (``JobModel.producer_names``). An earlier run's end of stream is still skipped (a later run
    may have more input), and so is a watermark of a task that is not (another elasticity
    factor). At least once a restarted task may send again what came before such a watermark,
    so there it is skipped too."""
    for sid, names in producers.items():
        codec = codecs.get(sid)
        if codec is not None:
            codec.earlier_marks = names


def stream_serde(serde: Serde[Any] | None, *, keyed: bool, intermediate: bool,
                 types: Mapping[str, type] | None = None) -> Serde[Any]:
    """The serde a byte system uses for a stream: its own, or the default (``SafeSerde`` of the
    declared ``types`` for intermediate streams)."""
    if serde is not None and not isinstance(serde, NoOpSerde):
        return serde
    default: Serde[Any] = SafeSerde(types or {}) if intermediate else JsonSerde()
    return KVSerde(default, default) if keyed else default


def serde_error_policy(config: JobConfig, stream_id: str) -> str:
    return config.stream(stream_id).serde_error


def _identity(data: bytes) -> bytes:
    return data


def fast_serializer(serde: Serde[Any]) -> Callable[[Any], bytes]:
    """A callable doing ``serde.serialize`` with no Python frame where the serde allows. It may
    raise any exception on bad input: callers then call ``serde.serialize`` for the clear error."""
    t = type(serde)
    if t is JsonSerde or t is MsgpackSerde:
        return cast(Callable[[Any], bytes], serde._encoder.encode)  # type: ignore[attr-defined]
    if t is SafeSerde:
        return cast(Callable[[Any], bytes], serde._encode)  # type: ignore[attr-defined]
    if t is StringSerde and serde.encoding == "utf-8":  # type: ignore[attr-defined]
        return str.encode
    return serde.serialize


def fast_deserializer(serde: Serde[Any]) -> Callable[[bytes], Any]:
    """As ``fast_serializer``, for ``serde.deserialize``."""
    t = type(serde)
    if t is JsonSerde or t is MsgpackSerde:
        return cast(Callable[[bytes], Any], serde._decoder.decode)  # type: ignore[attr-defined]
    if t is SafeSerde:
        return cast(Callable[[bytes], Any], serde._decode)  # type: ignore[attr-defined]
    if t is StringSerde and serde.encoding == "utf-8":  # type: ignore[attr-defined]
        return bytes.decode
    if t is BytesSerde:
        return _identity
    return serde.deserialize


_KEY_OF = itemgetter(0)


def _nones(keys: list[Any]) -> list[int]:
    """The indexes of the Nones in ``keys``, each found by ``list.index`` (in C)."""
    out: list[int] = []
    i = -1
    try:
        while True:
            i = keys.index(None, i + 1)
            out.append(i)
    except ValueError:
        return out


def _raises_on_none(serde: Serde[Any]) -> bool:
    t = type(serde)
    return t is JsonSerde or t is MsgpackSerde or t is SafeSerde or (
        t is StringSerde and serde.encoding == "utf-8")  # type: ignore[attr-defined]


class StreamCodec:
    """Encodes a stream's messages into records and decodes records, in batches."""

    #: traced (``runtime.host.tracing``): given each batch of records before it is decoded
    note_traces: Callable[[SSP, int, Sequence[Any]], None] | None = None

    def __init__(self, stream_id: str, serde: Serde[Any], *, policy: str = "fail",
                 dead_letter: Callable[[SSP, int, Record, SerdeError], None] | None = None,
                 metrics: Any = None, ahead: Any = None) -> None:
        self.stream_id = stream_id
        #: an input's ``max_event_time_ahead`` check (``runtime.engine.event_time_ahead``), or None
        self.ahead = ahead
        self.serde = serde
        self.keyed = isinstance(serde, KVSerde)
        self.policy = policy
        self._dead_letter = dead_letter
        self._metrics = metrics
        #: partition -> offsets of records to pass over in this run (``run --skip``)
        self.skip: dict[int, set[int]] = {}
        if isinstance(serde, KVSerde):
            self._key_serde: Serde[Any] | None = serde.key_serde
            self._value_serde = serde.value_serde
        else:
            self._key_serde = None
            self._value_serde = serde
        #: exactly once, an intermediate stream: the producing tasks whose watermarks of an
        #: earlier run still count (``keep_earlier_watermarks``); None: none do
        self.earlier_marks: frozenset[str] | None = None
        #: an intermediate stream: a decoded batch gives its records' origins
        #: (``runtime.engine.origins``), where they carry them
        self.origins = False
        #: the keys of its records' origins in the compact form, where the log writes them so
        self.origin_names: OriginNames | None = None
        #: the tasks of a running job read the stream: a record with an origin that does not
        #: decode is held in its batch (``OriginList.held``) for its task, which knows whether
        #: it is a replay of one it applied (``runtime.engine.origins.settle_held``)
        self.hold = False
        self._held: list[tuple[int, Callable[[], Any]]] = []
        self.encode = self._encoder()
        # both deserializers raise on None, so a batch may first be tried without None checks
        self._none_raises = self._key_serde is not None and all(
            _raises_on_none(sd) for sd in (self._key_serde, self._value_serde))
        # the longest key and value the serdes take: the fast deserializers do not check it
        self._caps = tuple((itemgetter(i), sd.max_bytes) for i, sd in ((0, self._key_serde),
                                                                       (1, self._value_serde))
                           if sd is not None and sd.max_bytes is not None)

    # -- encoding ---------------------------------------------------------------------------------

    def fast_serializers(self) -> tuple[Callable[[Any], bytes] | None, Callable[[Any], bytes]]:
        """(key, value) serializers of a keyed stream's non-None keys and values, with no Python
        frame where the serdes allow; key is None for a stream without a key serde. They may
        raise anything on bad input: ``encode`` then gives the clear error."""
        key = fast_serializer(self._key_serde) if self._key_serde is not None else None
        return key, fast_serializer(self._value_serde)

    def _encoder(self) -> Callable[[Any], Record]:
        vser = fast_serializer(self._value_serde)
        slow = self._encode_slow
        if self._key_serde is not None:
            kser = fast_serializer(self._key_serde)

            def encode_keyed(m: Any) -> Record:
                try:
                    if type(m) is KV:
                        k, v = m.key, m.value
                        return (None if k is None else kser(k), None if v is None else vser(v),
                                None)
                    return (None, vser(m), None)
                except Exception:
                    return slow(m)
            return encode_keyed

        def encode(m: Any) -> Record:
            try:
                if type(m) is KV:
                    k, v = m.key, m.value
                    return (None if k is None else default_key_bytes(k),
                            None if v is None else vser(v), None)
                return (None, vser(m), None)
            except Exception:
                return slow(m)
        return encode

    def _encode_slow(self, m: Any) -> Record:
        """The same as the fast encoder, through the serdes' own methods, for their errors."""
        vs = self._value_serde
        try:
            if type(m) is KV:
                ks = self._key_serde
                k = None if m.key is None else (ks.serialize(m.key) if ks is not None
                                                else default_key_bytes(m.key))
                return (k, None if m.value is None else vs.serialize(m.value), None)
            return (None, vs.serialize(m), None)
        except SerdeError as exc:
            raise SerdeError(f"cannot serialize a message for stream {self.stream_id!r}: "
                             f"{exc.reason}") from exc
        except Exception as exc:
            raise SerdeError(f"cannot serialize a {type(m).__name__} for stream "
                             f"{self.stream_id!r} with {self.serde.describe()}: {exc}") from exc

    # -- decoding ---------------------------------------------------------------------------------

    def decode_batch(self, ssp: SSP, first: int, records: Sequence[StoredRecord],
                     generation: int) -> list[Any]:
        """Messages, control messages and ``Skipped`` markers, one per record, in order; of an
        intermediate stream whose records carry origins, an ``OriginList`` that gives them."""
        if self._held:  # left by a decode that raised
            self._held = []
        if self.note_traces is not None:
            self.note_traces(ssp, first, records)
        out = self._decode_all(ssp, first, records, generation)
        held = self._held
        if held:
            self._held = []
        if self.origins:
            origins = origins_of_records(records)
            if origins is not None:
                return OriginList(out, origins, held or None, self.origin_names)
        for offset, act in held:  # (a record held has an origin: not reached)
            out[offset - first] = act()
        return out

    def _decode_all(self, ssp: SSP, first: int, records: Sequence[StoredRecord],
                    generation: int) -> list[Any]:
        if self.skip:
            offsets = self.skip.get(ssp.partition)
            if offsets and any(first <= o < first + len(records) for o in offsets):
                out = self._decode_skipping(ssp, first, records, generation, offsets)
                return out if self.ahead is None else self._check_ahead(ssp, first, records, out)
        if self.ahead is None:
            return self._decode_batch(ssp, first, records, generation)
        return self._check_ahead(ssp, first, records,
                                 self._decode_batch(ssp, first, records, generation))

    def _check_ahead(self, ssp: SSP, first: int, records: Sequence[StoredRecord],
                     out: list[Any]) -> list[Any]:
        """``out`` with each message whose event time is too far ahead of the wall clock under
        the stream's policy (``runtime.engine.event_time_ahead``)."""
        rule = self.ahead
        assert rule is not None
        for i in rule.scan(out, rule.limit()):
            t = rule.seconds(out[i])
            if self.policy == "fail":
                raise rule.failure(ssp.partition, first + i, t)
            reason = rule.passed_over(ssp.partition, first + i, t)
            if self.policy == "dead-letter" and self._dead_letter is not None:
                self._dead_letter(ssp, first + i, records[i], SerdeError(reason))
            out[i] = Skipped(reason)
        return out

    def _decode_skipping(self, ssp: SSP, first: int, records: Sequence[StoredRecord], generation: int,
                         offsets: set[int]) -> list[Any]:
        """As ``decode_batch``, with the records at ``offsets`` passed over, logged and counted."""
        out: list[Any] = []
        start = first
        for o in sorted(o for o in offsets if first <= o < first + len(records)):
            out += self._decode_batch(ssp, start, records[start - first:o - first], generation)
            log.warning("skipped %s partition %d offset %d as --skip asked", ssp.stream_id,
                        ssp.partition, o)
            if self._metrics is not None:
                self._metrics.inc("skipped-by-request")
                self._metrics.inc(f"{ssp.stream_id}.skipped-by-request")
            out.append(Skipped(f"skipped by request: {ssp.stream_id}:{ssp.partition}:{o}"))
            start = o + 1
        out += self._decode_batch(ssp, start, records[start - first:], generation)
        return out

    def _decode_batch(self, ssp: SSP, first: int, records: Sequence[StoredRecord],
                      generation: int) -> list[Any]:
        for part, cap in self._caps:  # a key or value too long: its serde's own error
            try:
                longest = max(map(len, map(part, records)), default=0)
            except TypeError:  # a None key or value
                longest = max(map(len, filter(None, map(part, records))), default=0)
            if longest > cap:
                return self._decode_careful(ssp, first, records, generation)
        vde = fast_deserializer(self._value_serde)
        try:
            if self._key_serde is not None:
                kde = fast_deserializer(self._key_serde)
                if self._none_raises:
                    # a record without a key (a control record, most likely) is looked for
                    # first, in C: the batch is not decoded up to it and then again
                    if None not in map(_KEY_OF, records):
                        try:  # no None key or value
                            return [KV(kde(k), vde(v))  # type: ignore[arg-type]
                                    for k, v, _ in records]
                        except Exception:
                            pass
                    # a few records without a key: the runs between them
                    nones = _nones(list(map(_KEY_OF, records)))
                    if 0 < len(nones) * 8 < len(records):
                        return self._runs_between(nones, records, kde, vde, generation)
                return self._kv_one_by_one(records, kde, vde, generation)
            return [(None if v is None else vde(v))
                    if h is None or type(h) is int or h[0][0] == ORIGIN_HEADER  # type: ignore[index]
                    else self._with_headers(k, v, h, generation) for k, v, h in records]
        except Exception:  # find the bad records one by one, with the serdes' own errors
            return self._decode_careful(ssp, first, records, generation)

    def _kv_one_by_one(self, records: Sequence[StoredRecord], kde: Callable[[bytes], Any],
                       vde: Callable[[bytes], Any], generation: int) -> list[Any]:
        return [KV(None if k is None else kde(k), None if v is None else vde(v))
                if h is None or type(h) is int or h[0][0] == ORIGIN_HEADER  # type: ignore[index]
                else self._with_headers(k, v, h, generation) for k, v, h in records]

    def _runs_between(self, nones: list[int], records: Sequence[StoredRecord],
                      kde: Callable[[bytes], Any], vde: Callable[[bytes], Any],
                      generation: int) -> list[Any]:
        """The records of a keyed stream, those at ``nones`` (no key: a control record, most
        likely) one by one and the runs between them at once."""
        out: list[Any] = []
        start = 0
        for i in [*nones, len(records)]:
            seg = records[start:i]
            try:
                out += [KV(kde(k), vde(v)) for k, v, _ in seg]  # type: ignore[arg-type]
            except Exception:
                out += self._kv_one_by_one(seg, kde, vde, generation)
            if i < len(records):
                out += self._kv_one_by_one(records[i:i + 1], kde, vde, generation)
            start = i + 1
        return out

    def _with_headers(self, k: bytes | None, v: bytes | None,
                      headers: tuple[tuple[str, bytes], ...] | int, generation: int) -> Any:
        if isinstance(headers, int):  # an origin in its compact form
            return self._decode_one(k, v)
        for name, data in headers:
            if name == CONTROL_HEADER:
                gen, message = _control_decoder.decode(data)
                if gen == generation:
                    return message
                marks = self.earlier_marks
                if marks is not None and gen < generation and type(message) is Watermark \
                        and message.producer in marks:
                    return message
                return _STALE
        return self._decode_one(k, v)

    def _decode_one(self, k: bytes | None, v: bytes | None) -> Any:
        vs = self._value_serde
        value = None if v is None else vs.deserialize(v)
        ks = self._key_serde
        if ks is None:
            return value
        return KV(None if k is None else ks.deserialize(k), value)

    def _decode_careful(self, ssp: SSP, first: int, records: Sequence[StoredRecord],
                        generation: int) -> list[Any]:
        out: list[Any] = []
        for i, (k, v, h) in enumerate(records):
            try:
                out.append(self._decode_one(k, v) if h is None or type(h) is int
                           else self._with_headers(k, v, h, generation))
            except Exception as exc:
                out.append(self._bad_record(ssp, first + i, (k, v, h), exc))
        return out

    def _bad_record(self, ssp: SSP, offset: int, stored: StoredRecord, exc: Exception
                    ) -> Skipped:
        h = stored[2]
        origin = origin_of_headers(h, self.origin_names) if self.origins else None
        record: Record = (stored[0], stored[1], (None if origin is None else origin_header(
            origin)) if isinstance(h, int) else h)  # the compact form as headers: dead letters
        if origin is not None and self.hold:
            self._held.append((offset, lambda: self._act(ssp, offset, record, exc, origin)))
            return _HELD
        return self._act(ssp, offset, record, exc, origin)

    def _act(self, ssp: SSP, offset: int, record: Record, exc: Exception, origin: Any
             ) -> Skipped:
        """The stream's policy on a record that does not decode (``origin``: where it came
        from, for a record of an intermediate stream)."""
        reason = exc.reason if isinstance(exc, SerdeError) else f"{type(exc).__name__}: {exc}"
        skip = ""
        if origin is not None:  # a record of an intermediate stream: the message it came from
            reason = f"{reason} (a record written for the message at {origin_text(origin)})"
            skip = (f", or pass over this record once (`samza-dsl run APP --skip "
                    f"{ssp.stream_id}:{ssp.partition}:{offset}`, which passes over the copies "
                    f"of it that a replay writes again too)")
        err = SerdeError(reason, data=record[1], stream=ssp.stream_id, partition=ssp.partition,
                         offset=offset)
        if self.policy == "fail":
            raise SerdeError(
                f"{reason}. The job stopped before this message; its checkpoint stays before it. "
                f"Fix the producer or the stream's serde, or set "
                f"streams.{ssp.stream_id}.samza.serde.error to skip or dead-letter{skip}",
                data=record[1], stream=ssp.stream_id, partition=ssp.partition,
                offset=offset) from exc
        if self._metrics is not None:
            self._metrics.inc("serde-errors-skipped")
            self._metrics.inc(f"{ssp.stream_id}.serde-errors-skipped")
        if self.policy == "dead-letter" and self._dead_letter is not None:
            self._dead_letter(ssp, offset, record, err)
            log.warning("%s: sent to the dead-letter stream", err)
        else:
            log.warning("%s: skipped (streams.%s.samza.serde.error=skip)", err, ssp.stream_id)
        return Skipped(reason)


    def unreadable(self, ssp: SSP, offset: int, span: int, raw: bytes, reason: str
                   ) -> list[Skipped]:
        """The records at ``[offset, offset + span)`` that the system could not read back (a
        stored batch failing its checksum), under the stream's policy as a record that fails to
        deserialize: ``fail`` raises, ``skip`` and ``dead-letter`` pass over them, logged and
        counted (the dead-letter stream gets the stored bytes once, as one record)."""
        last = offset + span - 1
        if self.policy == "fail":
            raise SerdeError(
                f"{reason}. The job stopped before these messages; its checkpoint stays before "
                f"them. Set streams.{ssp.stream_id}.samza.serde.error to skip or dead-letter to "
                f"pass over offsets {offset} to {last}", stream=ssp.stream_id,
                partition=ssp.partition, offset=offset)
        if self._metrics is not None:
            self._metrics.inc("serde-errors-skipped", span)
            self._metrics.inc(f"{ssp.stream_id}.serde-errors-skipped", span)
        err = SerdeError(reason, stream=ssp.stream_id, partition=ssp.partition, offset=offset)
        if self.policy == "dead-letter" and self._dead_letter is not None:
            self._dead_letter(ssp, offset, (None, raw, None), err)
        log.warning("%s partition %d offsets %d to %d: %s; passed over "
                    "(streams.%s.samza.serde.error=%s)", ssp.stream_id, ssp.partition, offset,
                    last, reason, ssp.stream_id, self.policy)
        return [Skipped(reason)] * span


def dead_letter_record(ssp: SSP, offset: int, record: Record, err: SerdeError) -> Record:
    """The raw record with the error and its origin as headers."""
    headers = tuple(record[2] or ()) + (
        (ERROR_HEADER, str(err.reason).encode()),
        (SOURCE_HEADER, f"{ssp.stream_id}/{ssp.partition}/{offset}".encode()))
    return (record[0], record[1], headers)


class BufferedProducer:
    """What every producer of records shares: a buffer per partition of each stream, filled by
    the tasks' senders (``sender``, or ``record_sink`` for the batched path) and by ``send`` for
    control records; subclasses write the buffers out (``flush``)."""

    def __init__(self, generation: int) -> None:
        self._generation = generation
        #: the container's producer whose generation this one's control records carry (a
        #: task's own producer: ``serve``)
        self._of: BufferedProducer | None = None
        #: metrics: records and bytes written out, and the nanoseconds flushes took
        self.sends = 0
        self.sent_bytes = 0
        self.flush_ns = 0
        #: messages written out per stream (control records left out), counted as they go: a
        #: run's summary needs no reading back of what retention may have deleted since
        self.written: dict[str, int] = {}
        # control records waiting in a partition's buffer, to leave out of ``written``
        self._controls: dict[tuple[str, int], int] = {}
        self._physical: dict[str, str] = {}
        self._encoders: dict[str, Callable[[Any], Record]] = {}
        self._codecs: dict[str, StreamCodec] = {}
        self._bufs: dict[str, list[list[Record]]] = {}

    @property
    def generation(self) -> int:
        """The run whose control records this producer writes: a task's own producer always
        takes its container producer's, which a member of a consumer group learns only with
        its first tasks, after their producers were made."""
        return self._generation if self._of is None else self._of.generation

    @generation.setter
    def generation(self, value: int) -> None:
        self._generation = value

    def serve(self, shared: BufferedProducer) -> None:
        """Become a task's own producer of ``shared``, the container's: its streams, and its
        generation from now on."""
        self._of = shared
        for sid, parts in shared._bufs.items():
            self.add_stream(sid, shared._physical[sid], len(parts), shared._encoders.get(sid),
                            shared._codecs.get(sid))

    def counts(self) -> ProducerCounts:
        """What it wrote out so far (``runtime.engine.systems.Producer.counts``)."""
        return ProducerCounts(self.sends, self.sent_bytes, self.flush_ns, dict(self.written))

    def add_stream(self, stream_id: str, physical: str, partitions: int,
                   encode: Callable[[Any], Record] | None, codec: StreamCodec | None = None
                   ) -> None:
        self._physical[stream_id] = physical
        if encode is not None:
            self._encoders[stream_id] = encode
        if codec is not None:
            self._codecs[stream_id] = codec
        self._bufs[stream_id] = [[] for _ in range(partitions)]

    def buffer(self, stream_id: str, partition: int) -> list[Record]:
        """The buffer of one partition, for raw records (changelogs, dead letters)."""
        return self._bufs[stream_id][partition]

    def sender(self, stream_id: str) -> Callable[[int, Any], None]:
        bufs = self._bufs[stream_id]
        encode = self._encoders[stream_id]

        def send(partition: int, m: Any) -> None:
            bufs[partition].append(encode(m))
        return send

    def origin_ids(self, keys: list[str]) -> Mapping[str, int] | None:
        """Ids of origin keys where the system stores records' origins in their compact form
        (``runtime.engine.origins``); None where records carry them in headers."""
        return None

    def record_sink(self, stream_id: str) -> StreamSink | None:
        """The records of a stream with a codec, for the task's fused terminals
        (``runtime.engine.systems.StreamSink``)."""
        codec = self._codecs.get(stream_id)
        if codec is None:
            return None
        kser, vser = codec.fast_serializers()
        return StreamSink([b.append for b in self._bufs[stream_id]], kser, vser, codec.encode)

    def send(self, stream_id: str, partition: int, payload: Any) -> None:
        if is_control(payload):
            record = control_record(payload, self.generation)
            key = (stream_id, partition)
            self._controls[key] = self._controls.get(key, 0) + 1
        else:
            record = self._encoders[stream_id](payload)
        self._bufs[stream_id][partition].append(record)

    def _taken(self, stream_id: str, partition: int, n: int) -> None:
        """The ``n`` records of a partition's buffer are written out: count its messages."""
        controls = self._controls.pop((stream_id, partition), 0) if self._controls else 0
        self.written[stream_id] = self.written.get(stream_id, 0) + n - controls
