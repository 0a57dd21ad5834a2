"""The connector API (``samza_dsl.connectors``) as the runtime drives it (``runtime/engine/sinks.py``):
the order of a sink's calls, what a restart hands back, back-pressure through an awaited
write, and errors that name the sink, the stream and the task."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from samza_dsl import KV, StreamApplication
from samza_dsl.connectors import Committed, Sink, SinkContext, SinkError, SinkSystem
from samza_dsl.errors import SamzaError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner


class Recording(Sink):
    """Keeps every call in ``calls`` (shared by the tasks' sinks)."""

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls
        self.buffer: list[Any] = []

    def open(self, ctx: SinkContext) -> None:
        self.task = ctx.task_name
        self.calls.append(("open", ctx.task_name, ctx.stream_id, ctx.partitions))

    def recover(self, committed: Committed) -> None:
        self.calls.append(("recover", self.task, committed))

    def write(self, partition: int, message: Any) -> None:
        self.buffer.append((partition, message))

    def prepare(self, checkpoint_id: int) -> Any:
        self.calls.append(("prepare", self.task, checkpoint_id, list(self.buffer)))
        self.buffer.clear()
        return {"upto": checkpoint_id}

    def commit(self, checkpoint_id: int) -> None:
        self.calls.append(("commit", self.task, checkpoint_id))

    def abort(self) -> None:
        self.calls.append(("abort", self.task))

    def close(self) -> None:
        self.calls.append(("close", self.task))


def _app(sink: Any, *, partitions: int = 1, mem: bool = True) -> tuple[StreamApplication, Any]:
    app = StreamApplication("sinks")
    if mem:
        inp = MemorySystem().input("in")
    else:
        inp = LocalSystem("local").input("in", serde=KVSerde(StringSerde(), JsonSerde()),
                                         partitions=2)
    out = app.output(SinkSystem("rec").output("rows", sink=sink, partitions=partitions))
    app.input(inp).send_to(out)
    return app, inp


def test_a_sink_is_opened_recovered_written_prepared_committed_and_closed_in_order() -> None:
    calls: list[Any] = []
    app, inp = _app(lambda ctx: Recording(calls), partitions=3)
    TestRunner(app).add_input(inp, [KV("a", 1), KV("b", 2)]).run()
    assert [c[0] for c in calls] == ["open", "recover", "prepare", "commit", "close"]
    assert calls[0] == ("open", "Partition 0", "rows", 3)
    assert calls[1][2] == Committed(0, None)
    written = calls[2][3]
    assert [m for _, m in written] == [KV("a", 1), KV("b", 2)]
    assert all(0 <= p < 3 for p, _ in written)  # the stream's partition rule, by key


def test_a_restart_hands_each_sink_what_its_last_checkpoint_recorded(tmp_path: Path) -> None:
    from runtime import LocalRunner
    from runtime.local.system import LocalJob

    runs: list[list[Any]] = []
    app, _ = _app(lambda ctx: Recording(runs[-1]), mem=False)
    config = {"job.dir": str(tmp_path / "job")}
    for n in range(2):
        runs.append([])
        job = LocalJob(app, config, run=False)
        job.load("in", [KV(str(i), i) for i in range(10 * n, 10 * n + 10)])
        job.close()
        LocalRunner(app, config).run().close()
    first, second = runs
    assert {c[2] for c in first if c[0] == "recover"} == {Committed(0, None)}
    for task in ("Partition 0", "Partition 1"):
        last = max(c[2] for c in first if c[0] == "commit" and c[1] == task)
        got = [c[2] for c in second if c[0] == "recover" and c[1] == task]
        assert got == [Committed(last, {"upto": last})]
        # ids go on growing across restarts
        assert min(c[2] for c in second if c[0] == "prepare" and c[1] == task) == last + 1


class Slow(Sink):
    """Each write awaits: the message waits for it (back-pressure)."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.in_flight = 0
        self.most = 0

    def write(self, partition: int, message: Any) -> Any:
        async def later() -> None:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            await asyncio.sleep(0.001)
            self.rows.append(message)
            self.in_flight -= 1
        return later()

    def prepare(self, checkpoint_id: int) -> Any:
        assert self.in_flight == 0  # a commit waits for every write of the messages it covers
        return len(self.rows)


def test_an_awaited_write_holds_its_message_and_the_commit_waits_for_it() -> None:
    sinks: list[Slow] = []

    def make(ctx: SinkContext) -> Slow:
        sinks.append(Slow())
        return sinks[-1]

    app, inp = _app(make)
    TestRunner(app, config={"task.max.concurrency": 4}).add_input(inp, list(range(50))).run()
    assert sorted(sinks[0].rows) == list(range(50))
    assert 1 < sinks[0].most <= 4


class Failing(Sink):
    def __init__(self, where: str) -> None:
        self.where = where

    def write(self, partition: int, message: Any) -> None:
        if self.where == "write":
            raise OSError("disk full")

    def prepare(self, checkpoint_id: int) -> Any:
        if self.where == "prepare":
            raise ConnectionError("refused")
        return None


@pytest.mark.parametrize("where", ["write", "prepare"])
def test_a_sink_s_error_names_the_sink_the_stream_and_the_task(where: str) -> None:
    app, inp = _app(lambda ctx: Failing(where))
    with pytest.raises(SamzaError) as err:
        TestRunner(app).add_input(inp, [1]).run()
    text = str(err.value)
    assert "output 'rows' of system 'rec'" in text and "'Partition 0'" in text, text
    assert ("disk full" if where == "write" else "refused") in text
    assert "restart" in text


def test_what_is_not_a_sink_and_what_a_sink_cannot_do_are_refused() -> None:
    with pytest.raises(TypeError, match="sink= must be a callable"):
        SinkSystem("x").output("rows")
    with pytest.raises(TypeError, match="leave serde out"):
        SinkSystem("x").output("rows", sink=lambda ctx: Sink(), serde=JsonSerde())
    app, inp = _app(lambda ctx: object())
    with pytest.raises(SinkError, match="not a samza_dsl.connectors.Sink"):
        TestRunner(app).add_input(inp, [1]).run()
    app, inp = _app(lambda ctx: Recording([]))
    with pytest.raises(SamzaError, match="task.async.commit"):
        TestRunner(app, config={"task.async.commit": True}).add_input(inp, [1]).run()


def test_a_failed_task_aborts_its_sinks() -> None:
    calls: list[Any] = []

    def boom(m: int) -> int:
        if m == 3:
            raise ValueError("bad")
        return m

    app = StreamApplication("sinks")
    inp = MemorySystem().input("in")
    out = app.output(SinkSystem("rec").output("rows", sink=lambda ctx: Recording(calls)))
    app.input(inp).map(boom, name="boom").send_to(out)
    with pytest.raises(SamzaError, match="bad"):
        TestRunner(app).add_input(inp, [1, 2, 3]).run()
    assert [c[0] for c in calls][-2:] == ["abort", "close"]
