"""Checkpoints cover only fully processed messages (docs/semantics.md rules 12, 13, 16).

The checkpoint store is wrapped so that every write checks, at the moment it happens, that every
offset at or before the written one has completed (and, for rule 16, that its output was flushed
before the write). Completion is recorded where a message's processing ends: in the sink after
the async call, in the async call for a message it drops, or in the filter for a message dropped
inline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.engine.container import Container, MemoryCheckpoints
from runtime.engine.job import SSP
from runtime.memory import MemoryBroker, MemoryProducer, memory_job
from runtime.testing import run_container as run_memory_container
from samza_dsl import StreamApplication
from samza_dsl.errors import TaskError
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

RUN_TIMEOUT = 5.0


def run_container(app: StreamApplication, inputs: Mapping[Any, Mapping[int, list[Any]]], *,
                  checkpoints: MemoryCheckpoints | None = None,
                  producer: Callable[[MemoryBroker], Any] = MemoryProducer,
                  before_run: Callable[[Container], None] | None = None,
                  timeout: float = RUN_TIMEOUT) -> tuple[MemoryBroker, Container]:
    """What ``TestRunner.run`` does, with the checkpoint store and producer supplied."""
    _, broker, container = memory_job(app, {d.stream_id: parts for d, parts in inputs.items()},
                                      {}, {}, checkpoints=checkpoints, producer=producer)
    if before_run is not None:
        before_run(container)
    run_memory_container(container, timeout)
    return broker, container


class Tracker:
    """Which messages (partition, offset) started and completed."""

    def __init__(self) -> None:
        self.started: set[tuple[int, int]] = set()
        self.completed: set[tuple[int, int]] = set()

    def in_flight(self, partitions: set[int]) -> int:
        return sum(1 for p, _ in self.started - self.completed if p in partitions)


class CheckedCheckpoints(MemoryCheckpoints):
    """Asserts at each write that every offset <= the written one has completed."""

    def __init__(self, tracker: Tracker, stream_id: str = "in") -> None:
        super().__init__()
        self.tracker = tracker
        self.stream_id = stream_id
        self.writes_in_flight = 0  # writes made while the task had messages in flight
        self.writes_held_back = 0  # writes that stopped before a message that had completed
        self.last: dict[SSP, int] = {}

    def write(self, task_name: str, offsets: Mapping[SSP, int],
              changelogs: Mapping[str, int] | None = None) -> None:
        done = self.tracker.completed
        for ssp, offset in offsets.items():
            assert ssp.stream_id == self.stream_id
            missing = [o for o in range(offset + 1) if (ssp.partition, o) not in done]
            assert not missing, (f"{task_name} checkpoints {ssp} at offset {offset} while offsets "
                                 f"{missing} have not completed")
            assert offset >= self.last.get(ssp, -1), f"{ssp}'s checkpoint moved back"
            self.last[ssp] = offset
            if any(p == ssp.partition and o > offset for p, o in done):
                self.writes_held_back += 1
        # one input stream: a task's messages are those of the partitions it writes
        if self.tracker.in_flight({ssp.partition for ssp in offsets}):
            self.writes_in_flight += 1
        super().write(task_name, offsets)


def tracked_app(tracker: Tracker, delay: Callable[[int, int], float], *, concurrency: int,
                commit_ms: int, async_commit: bool, partitions: int,
                drop_inline: Callable[[int, int], bool] = lambda p, i: False,
                drop_async: Callable[[int, int], bool] = lambda p, i: False,
                one: bool = False) -> tuple[StreamApplication, Any]:
    """Messages are (partition, offset): filter (may drop inline) -> async_flat_map (sleeps, may
    drop; ``one``: ``async_map``, which drops with None) -> sink."""
    mem = MemorySystem()
    app = StreamApplication("ckpt", config={"task.max.concurrency": concurrency,
                                            "task.commit.ms": commit_ms,
                                            "task.async.commit": async_commit})
    inp = mem.input("in", partitions=partitions)

    def keep(m: tuple[int, int]) -> bool:
        tracker.started.add(m)
        if drop_inline(*m):
            tracker.completed.add(m)
            return False
        return True

    async def call(m: tuple[int, int]) -> list[tuple[int, int]]:
        await asyncio.sleep(delay(*m))
        if drop_async(*m):
            tracker.completed.add(m)
            return []
        return [m]

    async def call_one(m: tuple[int, int]) -> tuple[int, int] | None:
        (out,) = await call(m) or [None]
        return out

    kept = app.input(inp).filter(keep, name="keep")
    called = kept.async_map(call_one, name="call") if one \
        else kept.async_flat_map(call, name="call")
    called.sink(tracker.completed.add, name="done")
    return app, inp


def final_offsets(checkpoints: MemoryCheckpoints) -> dict[int, int]:
    return {ssp.partition: off for cps in checkpoints.checkpoints.values()
            for ssp, off in cps.items()}


# --- (b) the checkpoint never passes a message in flight -----------------------------------------

@pytest.mark.parametrize("one", [False, True], ids=["async_flat_map", "async_map"])
def test_checkpoint_never_passes_an_in_flight_message_when_later_messages_finish_first(
        one: bool) -> None:
    tracker = Tracker()
    n = 64
    # in every group of 8 the later messages are faster; every 5th is dropped inline and every
    # 7th by the async call, so inline and async completions interleave
    app, inp = tracked_app(tracker, lambda p, i: (7 - i % 8) * 0.002, concurrency=8,
                           commit_ms=1, async_commit=True, partitions=1,
                           drop_inline=lambda p, i: i % 5 == 0,
                           drop_async=lambda p, i: i % 7 == 0, one=one)
    checkpoints = CheckedCheckpoints(tracker)
    run_container(app, {inp: {0: [(0, i) for i in range(n)]}}, checkpoints=checkpoints)
    assert tracker.completed == {(0, i) for i in range(n)}
    assert final_offsets(checkpoints) == {0: n - 1}
    # the test means something only if commits did overlap with messages in flight and did hold
    # the position back behind a message that completed out of order
    assert checkpoints.writes_in_flight > 0
    assert checkpoints.writes_held_back > 0


def test_without_async_commit_a_commit_never_overlaps_a_message_in_flight() -> None:
    tracker = Tracker()
    app, inp = tracked_app(tracker, lambda p, i: (3 - i % 4) * 0.002, concurrency=4,
                           commit_ms=1, async_commit=False, partitions=2)
    in_flight_at_write: list[int] = []

    class Exclusive(CheckedCheckpoints):
        container: Container

        def write(self, task_name: str, offsets: Mapping[SSP, int],
              changelogs: Mapping[str, int] | None = None) -> None:
            task = next(t for t in self.container.tasks if t.name == task_name)
            in_flight_at_write.append(task.in_flight)
            super().write(task_name, offsets)

    checkpoints = Exclusive(tracker)
    run_container(app, {inp: {0: [(0, i) for i in range(40)], 1: [(1, i) for i in range(40)]}},
                  checkpoints=checkpoints,
                  before_run=lambda c: setattr(checkpoints, "container", c))
    assert len(in_flight_at_write) > 2
    assert set(in_flight_at_write) == {0}
    assert checkpoints.writes_in_flight == 0
    assert final_offsets(checkpoints) == {0: 39, 1: 39}


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), sizes=st.lists(st.integers(0, 30), min_size=1, max_size=3),
       concurrency=st.integers(1, 32), commit_ms=st.integers(1, 5),
       async_commit=st.booleans(), one=st.booleans())
def test_checkpoint_never_passes_an_in_flight_message_in_any_completion_order(
        data: st.DataObject, sizes: list[int], concurrency: int, commit_ms: int,
        async_commit: bool, one: bool) -> None:
    delays = {(p, i): data.draw(st.integers(0, 4)) / 1000.0
              for p, n in enumerate(sizes) for i in range(n)}
    dropped_inline = data.draw(st.sets(st.sampled_from(sorted(delays)))) if delays else set()
    dropped_async = data.draw(st.sets(st.sampled_from(sorted(delays)))) if delays else set()
    tracker = Tracker()
    app, inp = tracked_app(tracker, lambda p, i: delays[(p, i)], concurrency=concurrency,
                           commit_ms=commit_ms, async_commit=async_commit,
                           partitions=len(sizes),
                           drop_inline=lambda p, i: (p, i) in dropped_inline,
                           drop_async=lambda p, i: (p, i) in dropped_async, one=one)
    checkpoints = CheckedCheckpoints(tracker)
    run_container(app, {inp: {p: [(p, i) for i in range(n)] for p, n in enumerate(sizes)}},
                  checkpoints=checkpoints)
    assert tracker.completed == set(delays)
    if not async_commit:
        assert checkpoints.writes_in_flight == 0
    assert final_offsets(checkpoints) == {p: n - 1 for p, n in enumerate(sizes) if n}


def test_commits_interleave_with_a_busy_synchronous_stream() -> None:
    """Priority commit > process: a task that always has input still commits on time, and its
    positions only move forward."""
    mem = MemorySystem()
    app = StreamApplication("busy", config={"task.commit.ms": 1})
    inp = mem.input("in", partitions=1)
    n = 200_000
    app.input(inp).map(lambda m: m + 1, name="inc").filter(lambda m: m % 2 == 0, name="even") \
        .sink(lambda m: None, name="drop")
    result = TestRunner(app).add_input(inp, list(range(n))).run(timeout=RUN_TIMEOUT)
    written = [cps[SSP("in", 0)] for _, cps in result.checkpoints.history if cps]
    assert written == sorted(written)
    assert written[-1] == n - 1
    assert len([o for o in written if o < n - 1]) >= 2, "no commit while the input flowed"


# --- rule 16: flush the producer, then write offsets ---------------------------------------------

class SlowFlushProducer(MemoryProducer):
    """A producer whose flush takes time, like Kafka's: what was sent before a flush started is
    durable when it returns; what is sent during it is not."""

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self.sent: list[Any] = []
        self.durable: set[Any] = set()

    def send(self, stream_id: str, partition: int, payload: Any) -> None:
        self.sent.append(payload)
        super().send(stream_id, partition, payload)

    def sender(self, stream_id: str) -> Any:
        inner = super().sender(stream_id)

        def send(partition: int, payload: Any) -> None:
            self.sent.append(payload)
            inner(partition, payload)
        return send

    async def flush(self) -> None:
        batch = list(self.sent)
        await asyncio.sleep(0.002)
        self.durable.update(batch)
        await super().flush()


def test_a_commit_writes_only_offsets_whose_outputs_the_flush_made_durable() -> None:
    """Commit order (rule 16): a message that completes while the producer flushes has outputs
    the flush did not cover, so the offsets written after the flush must not include it."""
    producers: list[SlowFlushProducer] = []

    class FlushChecked(MemoryCheckpoints):
        def write(self, task_name: str, offsets: Mapping[SSP, int],
              changelogs: Mapping[str, int] | None = None) -> None:
            durable = producers[0].durable
            for ssp, offset in offsets.items():
                lost = [o for o in range(offset + 1) if (ssp.partition, o) not in durable]
                assert not lost, (f"{task_name} checkpoints {ssp} at {offset}, but the outputs of "
                                  f"offsets {lost} were not flushed before the write")
            super().write(task_name, offsets)

    def producer(broker: MemoryBroker) -> SlowFlushProducer:
        producers.append(SlowFlushProducer(broker))
        return producers[0]

    mem = MemorySystem()
    # commits (2 ms each) every 4 ms, while messages keep completing
    app = StreamApplication("flush", config={"task.max.concurrency": 8, "task.commit.ms": 4,
                                             "task.async.commit": True})
    inp = mem.input("in", partitions=1)
    out = mem.output("out")

    async def call(m: tuple[int, int]) -> list[tuple[int, int]]:
        await asyncio.sleep((m[1] % 5) * 0.001)
        return [m]

    app.input(inp).async_flat_map(call, name="call").send_to(app.output(out))
    run_container(app, {inp: {0: [(0, i) for i in range(60)]}}, checkpoints=FlushChecked(),
                  producer=producer)


# --- resuming from a checkpoint: at-least-once ---------------------------------------------------

def test_a_task_resumes_after_its_checkpointed_offset() -> None:
    mem = MemorySystem()
    app = StreamApplication("resume")
    inp = mem.input("in", partitions=2)
    out = mem.output("out")
    app.input(inp).map(lambda m: m * 10).send_to(app.output(out))
    checkpoints = MemoryCheckpoints()
    checkpoints.write("Partition 0", {SSP("in", 0): 4})
    broker, _ = run_container(app, {inp: {0: list(range(10)), 1: list(range(3))}},
                              checkpoints=checkpoints)
    assert broker.messages("out", 0) == [50, 60, 70, 80, 90]
    assert broker.messages("out", 1) == [0, 10, 20]
    assert final_offsets(checkpoints) == {0: 9, 1: 2}


def test_a_failed_run_restarts_from_its_checkpoint_and_misses_nothing() -> None:
    """Run 1 fails at one message after some commits; run 2 (fixed function, same checkpoint
    store) starts after the checkpoint: together they cover every message (at-least-once), and run
    2 starts no later than the failed offset."""
    fail_at = 45
    broken = [True]
    seen: list[list[int]] = [[], []]

    def build() -> tuple[StreamApplication, Any]:
        mem = MemorySystem()
        app = StreamApplication("restart", config={"task.max.concurrency": 4,
                                                   "task.commit.ms": 1})

        async def slow(m: int) -> list[int]:
            await asyncio.sleep(0.001)
            return [m]

        def check(m: int) -> int:
            if broken[0] and m == fail_at:
                raise RuntimeError("boom")
            return m

        inp = mem.input("in", partitions=1)
        run = 0 if broken[0] else 1
        (app.input(inp).async_flat_map(slow, name="slow").map(check, name="check")
         .sink(seen[run].append, name="seen"))
        return app, inp

    checkpoints = MemoryCheckpoints()
    app, inp = build()
    with pytest.raises(TaskError) as err:
        run_container(app, {inp: {0: list(range(80))}}, checkpoints=checkpoints)
    assert err.value.offset == fail_at
    first_checkpoint = final_offsets(checkpoints).get(0, -1)
    assert first_checkpoint < fail_at
    assert checkpoints.history, "no commit happened before the failure: the test proves nothing"
    broken[0] = False
    app, inp = build()
    run_container(app, {inp: {0: list(range(80))}}, checkpoints=checkpoints)
    assert sorted(seen[1]) == list(range(first_checkpoint + 1, 80))
    assert set(seen[0]) | set(seen[1]) == set(range(80))
    assert fail_at not in seen[0]


def test_testrunner_reports_its_checkpoints() -> None:
    mem = MemorySystem()
    app = StreamApplication("tr")
    inp = mem.input("in", partitions=2)
    app.input(inp).sink(lambda m: None, name="drop")
    result = TestRunner(app).add_input(inp, {0: list(range(7)), 1: []}).run(timeout=RUN_TIMEOUT)
    assert final_offsets(result.checkpoints) == {0: 6}
    assert result.status["checkpoints"]["Partition 0"] == {"in[0]": 6}
    assert result.status["done"] is True
