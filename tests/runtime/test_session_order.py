"""Session windows within a declared bound (docs/semantics.md rule 8, Sessions):
where a bound is declared, on the input or on the window, a session window takes its messages in
event-time order below the watermark. A message that bridges two sessions merges them, and one
within the bound before its key's session is not late, as the reference model says, with or
without an async step before the window."""

from __future__ import annotations

import asyncio
import tempfile
from datetime import timedelta
from typing import Any

import pytest

from runtime import LocalRunner, TestRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing.model import interleave, run_window

SERDE = KVSerde(StringSerde(), JsonSerde())
GAP = timedelta(seconds=2)


def et(kv: KV[str, Any]) -> float:
    return float(kv.value["t"]) / 1000.0


async def same(kv: KV[str, Any]) -> list[KV[str, Any]]:
    await asyncio.sleep(0.001)
    return [kv]


def window(bound_ms: int) -> Any:
    return Windows.keyed_session(lambda kv: kv.key, GAP, event_time=et,
                                 max_out_of_orderness=timedelta(milliseconds=bound_ms)
                                 if bound_ms else None)


def build(system: Any, *, window_bound: int = 0, input_bound: int = 0,
          async_step: bool = False) -> StreamApplication:
    app = StreamApplication("so", config={"task.max.concurrency": 8})
    s = app.input(system.input("in", serde=SERDE, partitions=1,
                               event_time=et if input_bound else None,
                               max_out_of_orderness=timedelta(milliseconds=input_bound)
                               if input_bound else None))
    if async_step:
        s = s.async_flat_map(same, name="a", ordering="key")
    (s.window(window(window_bound), name="w")
     .map(lambda p: [p.key.key, p.key.pane_id, sorted(kv.value["t"] for kv in p.message)],
          name="row")
     .send_to(app.output(system.output("out", serde=JsonSerde(), partitions=1))))
    return app


def run(app: StreamApplication, times: list[int], local: bool) -> tuple[list[Any], int]:
    data = {0: [KV("a", {"t": t}) for t in times]}
    if not local:
        r = TestRunner(app).add_input("in", data).run(timeout=60)
        return sorted(r.messages("out")), r.late()
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(app, {"job.dir": tmp}, inputs={"in": data}).run()
        try:
            return sorted(runner.messages("out")), runner.late()
        finally:
            runner.close()


def model(times: list[int], bound_ms: int) -> tuple[list[Any], int]:
    """The reference model: one partition, its progress the latest event time less the bound."""
    msgs = [KV("a", {"t": t}) for t in times]
    steps, latest = [], -1
    for m in msgs:
        latest = max(latest, m.value["t"])
        steps.append(([m], latest - bound_ms))
    result = run_window(window(0), interleave({0: steps}))
    panes = sorted([p.key, p.pane_id, sorted(kv.value["t"] for kv in p.value)]
                   for p in result.panes)
    return panes, len(result.late)


@pytest.mark.parametrize("local", [False, True], ids=["TestRunner", "LocalRunner"])
@pytest.mark.parametrize("async_step", [False, True], ids=["plain", "async"])
@pytest.mark.parametrize("on", ["window", "input"])
def test_a_message_within_the_bound_bridges_two_sessions(on: str, async_step: bool,
                                                         local: bool) -> None:
    times = [0, 3000, 1500]  # gap 2 s: 1500 joins [0] and [3000] into one session
    system = MemorySystem() if not local else LocalSystem("local")
    app = build(system, window_bound=3000 if on == "window" else 0,
                input_bound=3000 if on == "input" else 0, async_step=async_step)
    got = run(app, times, local)
    assert got == ([["a", "0", [0, 1500, 3000]]], 0) == model(times, 3000)


@pytest.mark.parametrize("local", [False, True], ids=["TestRunner", "LocalRunner"])
@pytest.mark.parametrize("on", ["window", "input"])
def test_a_message_within_the_bound_a_gap_before_its_keys_session_is_not_late(
        on: str, local: bool) -> None:
    times = [2000, 0]  # 0 is 2 s behind: within the bound, a session of its own
    system = MemorySystem() if not local else LocalSystem("local")
    app = build(system, window_bound=2000 if on == "window" else 0,
                input_bound=2000 if on == "input" else 0)
    got = run(app, times, local)
    assert got == ([["a", "0", [0]], ["a", "2000", [2000]]], 0) == model(times, 2000)


def test_without_a_bound_the_same_message_is_late() -> None:
    """The control: no bound, the message 2 s behind its key's session is beyond it."""
    got = run(build(MemorySystem()), [2000, 0], False)
    assert got == ([["a", "2000", [2000]]], 1) == model([2000, 0], 0)
