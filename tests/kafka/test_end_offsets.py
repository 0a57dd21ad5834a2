"""``offset_bounds`` reads the last record batch where a broker reports the base offset of its
last batch + 1 as the end (tansu). A fetch that comes back empty (a busy machine, a consumer
still connecting) must not be taken for "nothing past the reported end": a run of two
containers once read 1 of an output partition's 80 records that way. The consumer is a fake
here, to make the fetch come back empty on demand; ``test_kafka_load_dump`` reads true end
offsets from a real broker."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from typing import Any

import pytest
from aiokafka import TopicPartition

from runtime.kafka import system

Rec = namedtuple("Rec", "offset")
TP = TopicPartition("out", 0)


class FakeConsumer:
    """A broker partition holding offsets [0, 80) in one batch, reporting its end as 1; its
    first ``empty`` fetches come back with nothing. ``marker``: offset 0 is a transaction
    marker (a fetch moves the position past it with no record)."""

    def __init__(self, empty: int, marker: bool = False) -> None:
        self.empty = empty
        self.marker = marker
        self.pos = 0
        self.fetches = 0

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def assign(self, tps: list[Any]) -> None:
        pass

    async def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        return {tp: 1 for tp in tps}

    async def beginning_offsets(self, tps: list[Any]) -> dict[Any, int]:
        return {tp: 0 for tp in tps}

    def seek(self, tp: Any, offset: int) -> None:
        self.pos = offset

    async def position(self, tp: Any) -> int:
        return self.pos

    async def getmany(self, tp: Any, timeout_ms: int) -> dict[Any, list[Rec]]:
        self.fetches += 1
        await asyncio.sleep(0)
        if self.fetches <= self.empty:
            return {}
        if self.marker:
            self.pos = 1
            return {}
        self.pos = 80
        return {tp: [Rec(o) for o in range(80)]}


@pytest.mark.parametrize("empty", [0, 1, 3])
def test_an_empty_fetch_is_fetched_again(monkeypatch: pytest.MonkeyPatch, empty: int) -> None:
    fake = FakeConsumer(empty)
    monkeypatch.setattr(system, "new_consumer", lambda *a, **k: fake)
    bounds = asyncio.run(system.offset_bounds("127.0.0.1:9", {TP: None}, {}, 10.0))
    assert bounds == {TP: (0, 80)}
    assert fake.fetches == empty + 1


def test_a_marker_at_the_reported_end_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeConsumer(0, marker=True)
    monkeypatch.setattr(system, "new_consumer", lambda *a, **k: fake)
    assert asyncio.run(system.offset_bounds("127.0.0.1:9", {TP: None}, {}, 10.0)) == {TP: (0, 1)}
    assert fake.fetches == 1


def test_fetches_that_stay_empty_end_within_half_the_time(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    fake = FakeConsumer(10 ** 9)

    async def slow_empty(tp: Any, timeout_ms: int) -> dict[Any, list[Rec]]:
        fake.fetches += 1
        await asyncio.sleep(0.05)
        return {}
    monkeypatch.setattr(fake, "getmany", slow_empty)
    monkeypatch.setattr(system, "new_consumer", lambda *a, **k: fake)
    loop_start = asyncio.run(_timed(system.offset_bounds("127.0.0.1:9", {TP: None}, {}, 0.6)))
    bounds, seconds = loop_start
    assert bounds == {TP: (0, 1)}  # nothing seen: the reported end
    assert 0.25 <= seconds < 0.6 and fake.fetches >= 5


async def _timed(coro: Any) -> tuple[Any, float]:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out = await coro
    return out, loop.time() - t0
