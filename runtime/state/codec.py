"""Bytes of stores: the codecs of window, join and table state, and the check of changelog
entries as a store is rebuilt from its changelog.

Window and join state keys use ``operators.state.encode_key`` (ordered); a key it does not
support (a struct, a ``KV``...) is ``SafeSerde``'s encoding after a tag byte that sorts after
every encoded key. Their values (panes of messages, accumulators, timestamps) are ``SafeSerde``
with the application's declared types: nothing in a store or a changelog is decoded by
unpickling, so bytes there are data, never code. Tables use their own serdes.

A store rebuilt from its changelog decodes each entry it replays. An entry that does not decode
follows ``streams.<changelog stream>.samza.serde.error``, as records of streams do: ``fail``
(the default) stops the job with an error naming the changelog, partition and offset; ``skip``
leaves the entry out (the store then lacks that key, or keeps its previous value) and counts it
in ``serde-errors-skipped``; ``dead-letter`` also writes the raw entry to ``<job>-dead-letter``.

>>> ke, kd, ve, vd = state_codec({}, "window state of operator 'w'")
>>> kd(ke((1700000000000, "user-7"))), vd(ve([("a", 1), {"n": 2}]))
((1700000000000, 'user-7'), [('a', 1), {'n': 2}])
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from operators.state import decode_key, encode_key, encode_keys, serialize_error, table_key_check
from runtime.engine.codec import Record, fast_deserializer, fast_serializer
from runtime.engine.job import SSP
from runtime.state.ttl import ttl_codec
from samza_dsl.errors import SerdeError
from samza_dsl.serdes import SafeSerde, Serde

__all__ = ["state_codec", "table_codec", "store_codecs", "store_key_check", "changelog_check",
           "FOREIGN_KEY"]

log = logging.getLogger("samza_dsl.state")

FOREIGN_KEY = b"\xfe"  # after every tag encode_key uses

Codec = tuple[Callable[[Any], bytes], Callable[[bytes], Any], Callable[[Any], bytes],
              Callable[[bytes], Any]]


def state_codec(types: Mapping[str, type], what: str) -> Codec:
    """(key encode, key decode, value encode, value decode) of window or join state; ``what``
    names the state in errors ("window state of operator 'x'")."""
    serde = SafeSerde(types)
    enc, dec = serde._encode, serde._decode

    def error(obj: Any, exc: Exception) -> SerdeError:
        return SerdeError(f"{what}: {serde._codec.encode_error(serde.describe(), obj).reason}")

    def key_encode(key: Any) -> bytes:
        try:
            return encode_key(key)
        except TypeError:
            try:
                return FOREIGN_KEY + enc(key)
            except Exception as exc:
                raise error(key, exc) from exc

    def key_decode(data: bytes) -> Any:
        if data[:1] == FOREIGN_KEY:
            return dec(data[1:])
        return decode_key(data)

    def value_encode(value: Any) -> bytes:
        try:
            return enc(value)
        except Exception as exc:
            raise error(value, exc) from exc

    encode_values = serde._codec.encode_many

    def keys_many(keys: list[Any]) -> list[bytes]:
        """``key_encode`` of each, in one pass (a flush: ``writeback.encode_all``)."""
        try:
            return encode_keys(keys)
        except TypeError:  # a key encode_key does not support: each as key_encode writes it
            return list(map(key_encode, keys))

    def values_many(values: list[Any]) -> list[bytes]:
        """``value_encode`` of each, in one pass, with its errors."""
        try:
            return encode_values(values)
        except Exception:
            return list(map(value_encode, values))

    key_encode.many = keys_many  # type: ignore[attr-defined]
    value_encode.many = values_many  # type: ignore[attr-defined]
    return key_encode, key_decode, value_encode, dec


def table_codec(serde: Serde[Any], what: str, store: str) -> tuple[Callable[[Any], bytes],
                                                                    Callable[[bytes], Any]]:
    """(encode, decode) of a table's keys or values with ``serde``. ``encode.many(list)``
    encodes a whole flush at once (``Serde.serialize_batch``), with the same errors."""
    fast_ser, fast_de = fast_serializer(serde), fast_deserializer(serde)

    def encode(obj: Any) -> bytes:
        try:
            return fast_ser(obj)
        except Exception:
            try:
                return serde.serialize(obj)
            except SerdeError as exc:
                raise serialize_error(store, what, exc.reason) from exc

    batch = (serde.serialize_batch if type(serde).serialize_batch is not Serde.serialize_batch
             else None)

    def many(objs: list[Any]) -> list[bytes]:
        """``encode`` of each, in one pass where the serde encodes batches."""
        try:
            return batch(objs) if batch is not None else list(map(fast_ser, objs))
        except Exception:  # the first that does not encode raises the table's own error
            return [encode(obj) for obj in objs]
    encode.many = many  # type: ignore[attr-defined]
    return encode, fast_de


def store_codecs(plan: Any, store_name: str) -> Codec:
    """The key and value encoders and decoders of the store ``store_name`` of ``plan``, in
    whatever holds its bytes (LMDB in a job, memory in ``TestRunner``): a table's with its
    ``KVSerde``, window and join state's with ``state_codec`` and the app's declared types."""
    spec = plan.stores[store_name]
    if spec.table is not None:
        serde = spec.table.serde
        ke, kd = table_codec(serde.key_serde, "key", store_name)
        ve, vd = table_codec(serde.value_serde, "value", store_name)
        if spec.table.ttl_ms is not None:  # (write time, value): runtime.state.ttl
            ve, vd = ttl_codec(ve, vd)
        return ke, kd, ve, vd
    return state_codec(plan.app.types,
                       f"{spec.kind} state {store_name!r} of operator {spec.op_id!r}")


def store_key_check(plan: Any, store_name: str) -> Callable[[Any], None] | None:
    """The check ``send_to`` and ``join_table`` make of each key of a table's store as it
    comes (``operators.state.table_key_check``); None for window and join state."""
    spec = plan.stores[store_name]
    if spec.table is None:
        return None
    return table_key_check(spec.table.serde.key_serde, store_name)


Entries = list[tuple[bytes, bytes | None]]


def changelog_check(store: str, stream: str, partition: int, key_decode: Callable[[bytes], Any],
                    value_decode: Callable[[bytes], Any], *, policy: str,
                    dead_letter: Callable[[SSP, int, Record, SerdeError], None] | None,
                    metrics: Any) -> Callable[[int | Sequence[int], Entries], Entries]:
    """``check(offsets, entries) -> the entries to replay`` (``offsets``: the first entry's, or
    each entry's, as ``Changelog.read`` gives them): decodes each entry and applies
    the policy to those that do not decode (see the module docstring)."""
    ssp = SSP(stream, partition)

    def bad(offset: int, entry: tuple[bytes, bytes | None], exc: Exception) -> None:
        reason = exc.reason if isinstance(exc, SerdeError) else f"{type(exc).__name__}: {exc}"
        reason = f"changelog of store {store!r}: cannot decode an entry ({reason})"
        if policy == "fail":
            raise SerdeError(
                f"{reason}. The store cannot be restored past it. Find who wrote to the "
                f"changelog, or set streams.{stream}.samza.serde.error to skip or dead-letter to "
                f"restore without the entry", data=entry[1] if entry[1] is not None else entry[0],
                stream=stream, partition=partition, offset=offset) from exc
        err = SerdeError(reason, data=entry[1], stream=stream, partition=partition, offset=offset)
        if metrics is not None:
            metrics.inc("serde-errors-skipped")
            metrics.inc(f"{stream}.serde-errors-skipped")
        if policy == "dead-letter" and dead_letter is not None:
            dead_letter(ssp, offset, (entry[0], entry[1], None), err)
            log.warning("%s: sent to the dead-letter stream", err)
        else:
            log.warning("%s: skipped (streams.%s.samza.serde.error=%s)", err, stream, policy)

    def check(first: int | Sequence[int], entries: Entries) -> Entries:
        try:
            for k, v in entries:
                key_decode(k)
                if v is not None:
                    value_decode(v)
            return entries
        except Exception:  # find the bad entries one by one
            pass
        kept: Entries = []
        for i, entry in enumerate(entries):
            try:
                key_decode(entry[0])
                if entry[1] is not None:
                    value_decode(entry[1])
            except Exception as exc:
                bad(first + i if type(first) is int else first[i],  # type: ignore[index]
                    entry, exc)
            else:
                kept.append(entry)
        return kept

    return check
