"""murmur2 is Kafka's: the values of Kafka's own tests, a byte-at-a-time reference, and
aiokafka's partitioner agree with it for any bytes."""

from __future__ import annotations

import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from operators.hashing import murmur2, partition_for

# Kafka's UtilsTest.testMurmur2
KAFKA_CASES = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def reference(data: bytes) -> int:
    """Kafka's Utils.murmur2 transcribed a byte at a time, with its signed 32-bit wrap-around."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(length // 4):
        j = 4 * i
        k = data[j] + (data[j + 1] << 8) + (data[j + 2] << 16) + (data[j + 3] << 24)
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize(("data", "expected"), sorted(KAFKA_CASES.items()))
def test_kafkas_own_values(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert reference(data) == expected


@given(st.binary(max_size=1200))  # past the longest length whose unpacker is kept
def test_any_bytes_hash_as_the_reference_and_aiokafka_do(data: bytes) -> None:
    h = murmur2(data)
    assert h == reference(data)
    assert -(1 << 31) <= h < 1 << 31
    assert h & 0x7FFFFFFF == aiokafka_murmur2(data) & 0x7FFFFFFF
    assert partition_for(data, 7) == (h & 0x7FFFFFFF) % 7


@given(st.binary(max_size=64))
def test_views_of_bytes_hash_as_the_bytes(data: bytes) -> None:
    assert murmur2(bytearray(data)) == murmur2(memoryview(data)) == murmur2(data)
