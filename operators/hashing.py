"""Stable hashes: Kafka's murmur2 partitioner. Python's ``hash()`` differs between processes and
must never choose a partition or a bucket.

>>> murmur2(b"21")
-973932308
>>> partition_for(b"21", 4)  # what Kafka's default partitioner (and a Java producer) picks
0
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

__all__ = ["murmur2", "to_positive", "partition_for", "stable_hash", "KeyPartitioner",
           "PartitionTable"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length & ~3
    if end:  # the whole 4-byte words, little-endian, unpacked in C
        for k in _words(end >> 2)(data):
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ (((k ^ (k >> 24)) * _M) & _MASK)
    rest = length & 3
    if rest:
        if rest == 3:
            h ^= data[end + 2] << 16
        if rest >= 2:
            h ^= data[end + 1] << 8
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


_UNPACK: dict[int, Callable[[bytes], tuple[int, ...]]] = {}


def _words(n: int) -> Callable[[bytes], tuple[int, ...]]:
    """Unpacks the first ``n`` little-endian 32-bit words of a buffer (kept for keys of up to
    1 KB, the lengths keys have)."""
    unpack = _UNPACK.get(n)
    if unpack is None:
        unpack = struct.Struct(f"<{n}I").unpack_from
        if n <= 256:
            _UNPACK[n] = unpack
    return unpack


def to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


def partition_for(key_bytes: bytes | None, partitions: int) -> int:
    """Kafka's default partition for a serialized key; a None key goes to partition 0."""
    if key_bytes is None:
        return 0
    return to_positive(murmur2(key_bytes)) % partitions


def stable_hash(data: bytes) -> int:
    """A non-negative hash that is the same in every process (murmur2)."""
    return to_positive(murmur2(data))


class PartitionTable(dict[Any, int]):
    """key -> partition, filled on lookup: ``table[key]`` is a C dict lookup when the key was seen
    (keys repeat: countries, users...), and hashes the key's bytes the first time. The table
    holds at most ``limit`` keys. Unhashable keys raise TypeError: use ``KeyPartitioner``."""

    __slots__ = ("partitions", "serialize", "limit")

    def __init__(self, partitions: int, serialize: Callable[[Any], bytes],
                 limit: int = 8192) -> None:
        super().__init__()
        self.partitions = partitions
        self.serialize = serialize
        self.limit = limit

    def __missing__(self, key: Any) -> int:
        p = 0 if key is None else partition_for(self.serialize(key), self.partitions)
        if len(self) >= self.limit:
            self.clear()
        self[key] = p
        return p


class KeyPartitioner:
    """Partitions by key with a bounded cache, since keys repeat (countries, users...)."""

    def __init__(self, partitions: int, serialize: Callable[[Any], bytes],
                 cache_size: int = 8192) -> None:
        self.partitions = partitions
        self.serialize = serialize
        self.table = PartitionTable(partitions, serialize, cache_size)

    def __call__(self, key: Any) -> int:
        try:
            return self.table[key]
        except TypeError:  # unhashable keys are not cached
            if key is None:
                return 0
            return partition_for(self.serialize(key), self.partitions)
