"""Runs of messages into a sink (``Sink.write_batch``, ``runtime.engine.batch_sink.sink_run``): a sink that
overrides it gets a run of one input partition's messages in one call per output partition, in
order, with the input position of each (``Sources``); a failing function or write stops the
task where one by one would; an awaitable it returns holds the commit; a sink that does not
override it gets ``write`` per message with its own ``source()``, as before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from samza_dsl import KV, StreamApplication
from samza_dsl.connectors import Sink, SinkContext, SinkSystem, Sources
from samza_dsl.errors import SamzaError
from samza_dsl.serdes import KVSerde, StringSerde
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner


class Runs(Sink):
    """Keeps each ``write_batch`` call (partition, messages, sources, ``ctx.source()`` then)
    and each ``write`` (partition, message, ``ctx.source()``)."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, list[Any], list[tuple[str, int, int]], Any]] = []
        self.writes: list[tuple[int, Any, Any]] = []
        self.events: list[str] = []

    def open(self, ctx: SinkContext) -> None:
        self.ctx = ctx

    def write(self, partition: int, message: Any) -> None:
        self.writes.append((partition, message, self.ctx.source()))
        self.events.append("write")

    def write_batch(self, partition: int, messages: list[Any], sources: Sources | None) -> None:
        assert sources is not None and len(sources) == len(messages)
        self.runs.append((partition, messages, list(sources), self.ctx.source()))
        self.events.append("batch")

    def abort(self) -> None:
        self.events.append("abort")

    def messages(self) -> list[Any]:
        return [m for _, ms, _, _ in self.runs for m in ms]


def _app(made: list[Any], make: Any = None, *, partitions: int = 1, keyed: bool = False,
         steps: Any = None) -> tuple[StreamApplication, Any]:
    app = StreamApplication("runs")
    inp = MemorySystem().input("in", serde=KVSerde(StringSerde(), StringSerde())) if keyed \
        else MemorySystem().input("in")

    def factory(ctx: SinkContext) -> Sink:
        made.append((make or Runs)())
        return made[-1]

    out = app.output(SinkSystem("rec").output("rows", sink=factory, partitions=partitions))
    stream = app.input(inp)
    if steps is not None:
        stream = steps(stream)
    stream.send_to(out)
    return app, inp


def test_a_run_reaches_the_sink_in_one_call_with_each_message_s_input_position() -> None:
    made: list[Runs] = []
    app, inp = _app(made, steps=lambda s: s.map(lambda m: m * 10, name="times")
                    .filter(lambda m: m % 30 != 0, name="some"))
    TestRunner(app).add_input(inp, list(range(100))).run()
    sink = made[0]
    kept = [m * 10 for m in range(100) if m * 10 % 30 != 0]
    assert sink.messages() == kept
    assert not sink.writes  # every message came in a run
    assert len(sink.runs) < len(kept)
    for _, messages, sources, source in sink.runs:
        # the input message each came from; ctx.source() is the run's last one
        assert [(s, p, o * 10) for s, p, o in sources] == [("in", 0, m) for m in messages]
        assert source == sources[-1]


def test_runs_are_cut_by_the_output_partition_and_keep_the_order() -> None:
    made: list[Runs] = []
    app, inp = _app(made, partitions=3, keyed=True)
    msgs = [KV(f"k{i % 7}", str(i)) for i in range(200)]
    TestRunner(app).add_input(inp, {0: msgs}).run()
    sink = made[0]
    assert sink.messages() == msgs
    parts = {m.key: p for p, ms, _, _ in sink.runs for m in ms}
    assert len(set(parts.values())) > 1
    for p, ms, sources, _ in sink.runs:
        assert {parts[m.key] for m in ms} == {p}  # one partition a call, by the key's rule
        assert [o for _, _, o in sources] == [int(m.value) for m in ms]
    assert not sink.writes and len(sink.runs) < len(msgs)


class OneByOne(Sink):
    def open(self, ctx: SinkContext) -> None:
        self.ctx = ctx
        self.writes: list[tuple[Any, Any]] = []

    def write(self, partition: int, message: Any) -> None:
        self.writes.append((message, self.ctx.source()))


def test_a_sink_without_write_batch_gets_each_message_with_its_own_source() -> None:
    made: list[OneByOne] = []
    app, inp = _app(made, OneByOne, steps=lambda s: s.filter(lambda m: m % 2 == 0, name="even"))
    TestRunner(app).add_input(inp, list(range(50))).run()
    assert made[0].writes == [(m, ("in", 0, m)) for m in range(0, 50, 2)]


def test_a_failing_function_stops_the_run_after_writing_what_came_before_it() -> None:
    made: list[Runs] = []

    def boom(m: int) -> int:
        if m == 37:
            raise ValueError("bad 37")
        return m

    app, inp = _app(made, steps=lambda s: s.map(boom, name="boom"))
    with pytest.raises(SamzaError, match="bad 37") as err:
        TestRunner(app).add_input(inp, list(range(100))).run()
    assert "boom" in str(err.value) and "offset 37" in str(err.value)
    sink = made[0]
    assert [m for _, ms, _, _ in sink.runs for m in ms] + [m for _, m, _ in sink.writes] == \
        list(range(37))
    assert sink.events[-1] == "abort"


class FailingRuns(Sink):
    def write(self, partition: int, message: Any) -> None:
        raise AssertionError("not called: runs go to write_batch")

    def write_batch(self, partition: int, messages: list[Any], sources: Sources | None) -> None:
        raise OSError("disk full")


def test_a_failing_write_batch_names_the_sink_the_call_and_the_task() -> None:
    app, inp = _app([], FailingRuns)
    with pytest.raises(SamzaError) as err:
        TestRunner(app).add_input(inp, [1, 2, 3]).run()
    text = str(err.value)
    assert "output 'rows' of system 'rec'" in text and "'Partition 0'" in text, text
    assert "write_batch (partition 0)" in text and "disk full" in text, text
    assert "restart" in text


class SlowRuns(Sink):
    """Each run awaits: its last message waits for it, and the commit waits for that."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.waiting = 0
        self.waited = 0

    def write(self, partition: int, message: Any) -> Any:
        return self.write_batch(partition, [message], None)

    def write_batch(self, partition: int, messages: list[Any], sources: Sources | None) -> Any:
        async def later() -> None:
            self.waiting += 1
            await asyncio.sleep(0.001)
            self.rows += messages
            self.waiting -= 1
            self.waited += 1
        return later()

    def prepare(self, checkpoint_id: int) -> Any:
        assert self.waiting == 0  # a commit waits for every write of the messages it covers
        return len(self.rows)


def test_an_awaited_run_holds_its_last_message_and_the_commit_waits_for_it() -> None:
    made: list[SlowRuns] = []
    app, inp = _app(made, SlowRuns)
    TestRunner(app, config={"task.max.concurrency": 4}).add_input(inp, list(range(500))).run()
    assert made[0].rows == list(range(500))
    assert made[0].waited < 500  # runs, not one call a message


def test_the_default_write_batch_writes_each_message_and_waits_for_what_they_return() -> None:
    got: list[Any] = []

    class Async(Sink):
        def write(self, partition: int, message: Any) -> Any:
            async def later() -> None:
                got.append((partition, message))
            return later() if message % 2 else None

    pending = Async().write_batch(2, [1, 2, 3], Sources("in", 0, range(5, 8)))
    assert pending is not None and got == []
    asyncio.run(pending)  # type: ignore[arg-type]
    assert got == [(2, 1), (2, 3)]
    assert Async().write_batch(0, [2, 4], None) is None
