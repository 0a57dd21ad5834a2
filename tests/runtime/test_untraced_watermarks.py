"""A window's watermark is the minimum over every producer feeding it, whether the event time is
declared on the input or only on the window (docs/semantics.md rule 8). A stream whose readers' event
time cannot be traced back to it (an async step or a join in between) is measured by its
producers with the window's event_time applied to the messages as they go into that step; where
that cannot be done, the stream holds its readers' watermark back until its producers end or go
idle. Either way, merged with a stream whose input declares event time, it loses no message."""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime import LocalRunner, TestRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem

SERDE = KVSerde(StringSerde(), JsonSerde())
RUN_TIMEOUT = 120.0


def ts(kv: KV[str, Any]) -> float:
    return float(kv.value["ts"])


class Stamp:
    """A map whose object has ``init(ctx)``: the runtime does not call it outside a task, so it
    cannot trace event time through it."""

    def init(self, ctx: Any) -> None:
        self.task = ctx.task_name

    def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
        return kv


def build(system: Any, between: str, delay: float = 0.0) -> StreamApplication:
    """a (no event time) -> partition_by -> ``between`` -> merge with b (event time declared)
    -> a keyed event-time window."""
    app = StreamApplication("untr", config={"task.max.concurrency": 100})
    a = app.input(system.input("a", serde=SERDE, partitions=2))
    b = app.input(system.input("b", serde=SERDE, partitions=2, event_time=ts))
    out = app.output(system.output("counts", serde=SERDE, partitions=1))

    async def slow(kv: KV[str, Any]) -> list[KV[str, Any]]:
        await asyncio.sleep(delay)
        return [kv]

    async def stamp(kv: KV[str, Any]) -> list[KV[str, Any]]:  # the event time comes here
        await asyncio.sleep(delay)
        return [KV(kv.key, {**kv.value, "ts": kv.value["at"]})]

    hop = a.partition_by(lambda kv: kv.value["user"], lambda kv: kv.value, serde=SERDE,
                         name="hop")
    if between == "async":
        s = hop.async_flat_map(slow, name="slow")
    elif between == "async-stamp":
        s = hop.async_flat_map(stamp, name="stamp")
    else:
        s = hop.map(Stamp(), name="object")
    (s.merge(b)
     .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                    fold=lambda m, n: n + 1, event_time=ts), name="w")
     .map(lambda p: KV(f"{p.key.key}@{p.key.pane_id}", p.message), name="rec")
     .send_to(out))
    return app


def data(field: str = "ts") -> tuple[dict[int, list[Any]], dict[int, list[Any]]]:
    a = {p: [KV(f"a{p}", {"user": f"a{p}", field: i * 0.25}) for i in range(400)]
         for p in range(2)}
    b = {p: [KV(f"b{p}", {"user": f"b{p}", "ts": i * 0.25}) for i in range(400)]
         for p in range(2)}
    return a, b


def counts(messages: list[Any]) -> dict[str, int]:
    return {kv.key: kv.value for kv in messages}


EXPECTED = {f"{k}{p}@{s * 10000}": 40 for k in "ab" for p in range(2) for s in range(10)}


@pytest.mark.parametrize("delay", [0.0, 0.003])
@pytest.mark.parametrize("between", ["async", "object", "async-stamp"])
def test_an_untraced_stream_merged_with_a_declared_one_loses_nothing(
        between: str, delay: float, caplog: pytest.LogCaptureFixture) -> None:
    a, b = data("at" if between == "async-stamp" else "ts")
    with caplog.at_level(logging.WARNING, logger="samza_dsl.watermarks"):
        result = TestRunner(build(MemorySystem(), between, delay)).add_input("a", a) \
            .add_input("b", b).run(timeout=RUN_TIMEOUT)
    assert result.late_counts == {} or result.late() == 0
    assert counts(result.messages("counts")) == EXPECTED
    warnings = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.watermarks"]
    stream = "'untr-1-partition_by-hop'"
    if between == "object":
        [warning] = warnings
        assert f"stream {stream} cannot be traced" in warning
        assert "holds their watermark back until its producers end or go idle" in warning
    else:
        step = "'untr-1-async_flat_map-slow'" if between == "async" \
            else "'untr-1-async_flat_map-stamp'"
        assert f"stream {stream} cannot be traced through {step}" in warnings[0]
        if between == "async-stamp":  # the window's event time does not fit before the step
            [failed] = warnings[1:]
            assert f"stream {stream}: the event time of its readers' windows failed" in failed
            assert "KeyError" in failed and "wait for its producers to end or go idle" in failed
        else:
            assert len(warnings) == 1


def test_on_the_local_system_too() -> None:
    a, b = data()
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(build(LocalSystem("local"), "async", 0.002), {"job.dir": tmp},
                             inputs={"a": a, "b": b}).run()
        try:
            assert runner.late_counts == {} or runner.late() == 0
            assert counts(runner.messages("counts")) == EXPECTED
        finally:
            runner.close()


def test_measured_through_the_async_step_it_lets_panes_close_while_following(
        tmp_path: Path) -> None:
    """The stream does not only hold the window back until it ends: its producers' progress,
    measured through the async step, closes panes while the job runs, with every message."""
    a, b = data()
    runner = LocalRunner(build(LocalSystem("local"), "async", 0.001),
                         {"job.dir": str(tmp_path / "job"), "task.commit.ms": 200},
                         inputs={"a": a, "b": b}, follow=True)
    runner.start()
    want = {k: n for k, n in EXPECTED.items() if not k.endswith("@90000")}
    deadline = time.monotonic() + 60
    seen: list[Any] = []
    try:
        while time.monotonic() < deadline and runner.status()["state"] != "running":
            time.sleep(0.01)
        while time.monotonic() < deadline and len(seen) < len(want):
            seen = runner.messages("counts")
            time.sleep(0.1)
    finally:
        runner.stop(timeout=60)
    assert counts(seen) == want  # [90, 100) waits for later data
