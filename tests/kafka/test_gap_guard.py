"""A Fetch answer that skips an offset of a gapless topic (the job's intermediate streams) is
read up to the gap, and the next fetch asks again from it: the test broker can make a later
batch visible before an earlier one when several producers (exactly once: one per task) write a
partition at once, and a reader that read on lost the record in between (an end of stream: the
bounded run waited forever). A gap that stays is taken as real, with a warning."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition

from runtime.kafka import resolved


@dataclass
class Rec:
    offset: int
    key: bytes = b"k"
    value: bytes = b"v"
    timestamp: int = 0
    timestamp_type: int = 0
    checksum: None = None
    headers: list[Any] = field(default_factory=list)


class FakeBatch:
    is_control_batch = False
    is_transactional = False
    producer_id = None

    def __init__(self, offsets: list[int]) -> None:
        self.records = [Rec(o) for o in offsets]
        self.base_offset = offsets[0]
        self.next_offset = offsets[-1] + 1

    def validate_crc(self) -> bool:
        return True

    def __iter__(self) -> Any:
        return iter(self.records)


class FakeAnswer:
    def __init__(self, *batches: list[int]) -> None:
        self.batches = [FakeBatch(b) for b in batches]

    def has_next(self) -> bool:
        return bool(self.batches)

    def next_batch(self) -> FakeBatch:
        return self.batches.pop(0)


def read(topic: str, fetch_offset: int, *batches: list[int]) -> tuple[list[int], int]:
    tp = TopicPartition(topic, 0)
    records = resolved._partition_records(tp, FakeAnswer(*batches), None, fetch_offset, None,
                                          None, True, 0)
    return [r.offset for r in records], records.next_fetch_offset


def test_an_answer_is_read_up_to_a_gap_and_fetched_again_from_it() -> None:
    resolved.gapless(["hop-a"])
    assert read("hop-a", 0, [0, 1], [3, 4]) == ([0, 1], 2)
    # the next answer from offset 2 has the batch that was missing
    assert read("hop-a", 2, [2], [3, 4]) == ([2, 3, 4], 5)
    # a topic that may have gaps (compacted) is read through them
    assert read("other", 0, [0, 1], [3, 4]) == ([0, 1, 3, 4], 5)


def test_a_gap_that_stays_is_read_past_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    resolved.gapless(["hop-b"])
    assert read("hop-b", 5, [5], [8]) == ([5], 6)
    for _ in range(resolved.GAP_FETCHES - 1):  # fetched again and again from the gap
        assert read("hop-b", 6, [8]) == ([], 6)
    with caplog.at_level(logging.WARNING, logger="runtime.kafka.resolved"):
        assert read("hop-b", 6, [8, 9]) == ([8, 9], 10)
    assert "topic 'hop-b' partition 0: offsets 6 to 7 did not come in 50 fetches" in caplog.text
