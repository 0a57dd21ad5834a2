"""The write-back layer every store of a job's tasks shares, over its bytes (LMDB's
``runtime.state.lmdb_store``, or memory's ``runtime.state.memory_store``): the dirty entries
(``Dirty``, whose ``__getitem__`` and ``__setitem__`` are a store's ``get`` and ``put``), their
encoding at a flush (``encode_entries``), the clean cache after it (``settle``), and the errors
of an entry that does not encode or decode, worded the same whichever bytes hold it.

A store's sizes come from the job's config: ``stores.<name>.object.cache.size`` (decoded
objects kept after a flush or a read, 100,000) and ``stores.<name>.write.batch.size`` (dirty
keys that make ``maybe_flush`` flush, 10,000).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any, cast

from samza_dsl.errors import ConfigError, SamzaError, SerdeError

__all__ = ["MISSING", "Dirty", "encode_all", "encode_entries", "settle", "evict", "decode_error",
           "store_sizes"]

MISSING: Any = object()

Entries = list[tuple[bytes, bytes | None]]


class Dirty(dict[Any, Any]):
    """The dirty entries (a delete is a dirty None); a missing key is looked up in the clean
    cache, then with ``load`` in the store's bytes."""

    __slots__ = ("clean", "load")

    clean: dict[Any, Any]
    load: Callable[[Any], Any]

    def __missing__(self, key: Any) -> Any:
        v = self.clean.get(key, MISSING)
        if v is MISSING:
            return self.load(key)
        return v


def encode_all(encode: Callable[[Any], bytes], objs: list[Any]) -> list[bytes]:
    """``encode`` of each of ``objs``: in one call where the encoder offers ``encode.many``
    (a table's serde that encodes batches, ``runtime.state.codec.table_codec``)."""
    many = getattr(encode, "many", None)  # foreign: a serde's function (``many`` where made so)
    return list(map(encode, objs)) if many is None else cast(list[bytes], many(objs))


def encode_entries(dirty: Mapping[Any, Any], key_encode: Callable[[Any], bytes],
                   value_encode: Callable[[Any], bytes], where: str) -> Entries:
    """The dirty entries encoded, in their order (None for a delete). One that does not encode
    raises a ``SerdeError`` (a ``SamzaError`` where the serde's error is not one) naming
    ``where`` (the store) and the entry's key."""
    try:
        keys = encode_all(key_encode, list(dirty))
        given = list(dirty.values())
        present = [v for v in given if v is not None]
        encoded = encode_all(value_encode, present)
        if len(present) == len(given):
            values = cast(list[bytes | None], encoded)
        else:  # deletes among them: None stays None
            it = iter(encoded)
            values = [None if v is None else next(it) for v in given]
    except Exception:
        _encode_error(dirty, key_encode, value_encode, where)
        raise
    return list(zip(keys, values, strict=True))


def _encode_error(dirty: Mapping[Any, Any], key_encode: Callable[[Any], bytes],
                  value_encode: Callable[[Any], bytes], where: str) -> None:
    """Raises the error naming the first dirty entry the serdes reject."""
    for k, v in dirty.items():
        try:
            key_encode(k)
            if v is not None:
                value_encode(v)
        except Exception as e:
            error = SerdeError if isinstance(e, SerdeError) else SamzaError
            raise error(
                f"{where}: cannot encode the entry for key {k!r} "
                f"({type(e).__name__}: {e}); the store's key and value serdes must accept "
                f"every key and value the job stores") from e


def settle(dirty: dict[Any, Any], clean: dict[Any, Any], cache_writes: bool,
           cache_size: int) -> None:
    """After a flush wrote ``dirty`` out: its entries move to the clean cache (unless
    ``cache_writes`` is False: then a value read before and written since leaves it), and the
    cache is cut down to half of ``cache_size`` (its oldest entries) once past it."""
    if cache_writes:
        clean.update(dirty)
    elif clean:  # a value read before and written since is stale
        pop = clean.pop
        for k in dirty:
            pop(k, None)
    dirty.clear()
    if len(clean) > cache_size:
        evict(clean, cache_size)


def evict(clean: dict[Any, Any], cache_size: int) -> None:
    """Drops the oldest-inserted entries of the clean cache, down to half its size."""
    for k in list(islice(clean, len(clean) - cache_size // 2)):
        del clean[k]


def decode_error(where: str, what: str, e: Exception) -> SerdeError:
    """The error of ``what`` (an entry of the store ``where``) that does not decode."""
    return SerdeError(
        f"{where}: {what} does not decode ({type(e).__name__}: {e}): another serde "
        f"wrote it (an older version of the job?) or it is damaged. Reset the job's state "
        f"(samza-dsl reset) to start it over")


def _positive(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key)
    if value is None:
        return default
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"config {key}={value!r} must be a whole number >= 1")
    return n


def store_sizes(config: Mapping[str, Any], store_name: str) -> tuple[int, int]:
    """(object cache size, write batch size) of a store, from the job's config."""
    return (_positive(config, f"stores.{store_name}.object.cache.size", 100_000),
            _positive(config, f"stores.{store_name}.write.batch.size", 10_000))
