"""Bootstrap and priority inputs (docs/semantics.md, "Bootstrap and priority inputs"): the order a
task hands out its inputs' messages, in memory (TestRunner) and on the embedded local system,
across a restart too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import LocalRunner
from runtime.engine.chooser import Batch, Chooser
from runtime.engine.container import FETCH_BATCH
from runtime.engine.job import SSP
from runtime.local.system import LocalJob
from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner

N = 1500  # more than one batch of each input


def build(system: Any, *, bootstrap: bool = False, priorities: dict[str, int | None] | None = None,
          name: str = "order", suffix: str = "") -> StreamApplication:
    """``clicks``, ``alerts`` and ``profiles`` (the last one read without a chooser) into one
    output partition, tagged with where they came from."""
    app = StreamApplication(name)
    out = app.output(system.output("out", serde=JsonSerde(), partitions=1,
                                   physical_name="out" + suffix))
    prio = {sid: p for sid, p in (priorities or {}).items() if p is not None}
    for sid in ("clicks", "alerts", "profiles"):
        d = system.input(sid, serde=JsonSerde(), partitions=1, physical_name=sid + suffix,
                         bootstrap=bootstrap and sid == "profiles", priority=prio.get(sid))
        app.input(d).map(lambda m, sid=sid: [sid, m], name=f"tag-{sid}").send_to(out)
    return app


def inputs(n: int = N, start: int = 0) -> dict[str, list[int]]:
    return {sid: list(range(start, start + n)) for sid in ("clicks", "alerts", "profiles")}


def sources(out: list[Any]) -> list[str]:
    """The inputs in the order their messages came out, each run of one input once."""
    runs: list[str] = []
    for sid, _ in out:
        if not runs or runs[-1] != sid:
            runs.append(sid)
    return runs


def run_memory(app: StreamApplication, data: dict[str, list[int]]) -> list[Any]:
    runner = TestRunner(app)
    for sid, msgs in data.items():
        runner.add_input(sid, msgs)
    return list(runner.run().messages("out"))


def run_local(app: StreamApplication, job_dir: Path,
              data: dict[str, list[int]] | None = None) -> list[Any]:
    local = LocalRunner(app, {"job.dir": str(job_dir)}, inputs=data).run()
    try:
        return list(local.messages("out"))
    finally:
        local.close()


def test_without_a_chooser_inputs_interleave() -> None:
    """The control: with no bootstrap or priority, the inputs take turns batch by batch, and
    profiles come last."""
    out = run_memory(build(MemorySystem()), inputs())
    assert sources(out) == ["alerts", "clicks", "profiles"] * -(-N // FETCH_BATCH)


@pytest.mark.parametrize("priority", [None, -5])
def test_a_bootstrap_input_goes_first_in_memory(priority: int | None) -> None:
    """Whatever its priority (which ranks it once it has caught up)."""
    out = run_memory(build(MemorySystem(), bootstrap=True, priorities={"profiles": priority}),
                     inputs())
    assert [m for sid, m in out[:N]] == list(range(N)) and sources(out)[0] == "profiles"
    assert "profiles" not in sources(out)[1:]
    assert len(out) == 3 * N


def test_higher_priorities_go_first_in_memory() -> None:
    out = run_memory(build(MemorySystem(), priorities={"profiles": 1, "alerts": 7}), inputs())
    assert sources(out) == ["alerts", "profiles", "clicks"]
    assert [m for _, m in out] == list(range(N)) * 3  # each input in its own order


def test_a_bootstrap_input_goes_first_on_every_start_of_the_local_system(
        tmp_path: Path) -> None:
    # the lowest priority: only bootstrapping puts profiles first
    app = build(LocalSystem("local"), bootstrap=True, priorities={"profiles": -5})
    first = run_local(app, tmp_path, inputs())
    assert first[:N] == [["profiles", m] for m in range(N)] and len(first) == 3 * N
    # more of every input, then a restart: the new profiles go first again
    job = LocalJob(app, {"job.dir": str(tmp_path)}, run=False)
    try:
        for sid, msgs in inputs(N, start=N).items():
            job.load(sid, msgs)
    finally:
        job.close()
    second = run_local(app, tmp_path)
    assert len(second) == 3 * N
    assert second[:N] == [["profiles", m] for m in range(N, 2 * N)]


def test_priorities_on_the_local_system(tmp_path: Path) -> None:
    """What the consumer delivered in one fetch (up to ``FETCH_BATCH`` records of each
    partition) is handed out by rank. Records of a higher rank still being fetched do not hold
    the others back (docs/semantics.md, rule 11), so the inputs fit one fetch here."""
    app = build(LocalSystem("local"), priorities={"clicks": -1, "profiles": 3})
    out = run_local(app, tmp_path, inputs(FETCH_BATCH))
    assert sources(out) == ["profiles", "alerts", "clicks"]


def test_a_caught_up_bootstrap_input_holds_nothing_back(tmp_path: Path) -> None:
    """An empty bootstrap input (its end is where the task starts) does not wait for data."""
    app = build(LocalSystem("local"), bootstrap=True)
    data = inputs(10)
    data["profiles"] = []
    out = run_local(app, tmp_path, data)
    assert len(out) == 20


def test_bootstrap_with_concurrency_completes_the_bootstrap_messages_first() -> None:
    import asyncio

    done: list[str] = []
    app = StreamApplication("order", config={"task.max.concurrency": 16})
    mem = MemorySystem()

    async def slow(m: Any) -> list[Any]:
        await asyncio.sleep(0.002 if m % 2 else 0)
        done.append("p")
        return []

    app.input(mem.input("clicks", partitions=1)).sink(lambda m: done.append("c"), name="c")
    app.input(mem.input("profiles", partitions=1, bootstrap=True)).async_flat_map(
        slow, name="slow").sink(print, name="p")
    TestRunner(app).add_input("clicks", list(range(50))).add_input(
        "profiles", list(range(50))).run()
    assert done == ["p"] * 50 + ["c"] * 50


def test_the_chooser_hands_back_a_preempted_batch_first() -> None:
    inbox = Chooser({"high": 1})
    inbox.append(Batch(SSP("low", 0), 0, [1, 2]))
    inbox.push_front(Batch(SSP("low", 0), 5, [3]))
    inbox.append(Batch(SSP("high", 0), 0, [9]))
    assert inbox.outranks(SSP("low", 0)) and not inbox.outranks(SSP("high", 0))
    inbox.only = {SSP("low", 0)}
    assert not inbox.outranks(SSP("low", 0))
    b = inbox.popleft()
    assert b is not None and (b.ssp, b.first, b.payloads) == (SSP("low", 0), 5, [3])
    inbox.only = None
    assert [b.ssp.stream_id for b in (inbox.popleft(), inbox.popleft())] == ["high", "low"]
    assert not inbox and not inbox.ready()


@pytest.mark.parametrize(("kw", "error"), [
    ({"bootstrap": 1}, "bootstrap must be True or False"),
    ({"priority": "high"}, "priority must be an int"),
    ({"priority": True}, "priority must be an int"),
])
def test_bad_settings_are_named(kw: dict[str, Any], error: str) -> None:
    with pytest.raises(TypeError, match=f"input 'x': {error}"):
        MemorySystem().input("x", **kw)


def test_a_bootstrap_input_longer_than_the_inbox_is_read_whole_first(tmp_path: Path) -> None:
    """While a task bootstraps it does not read its other partitions, so they cannot fill its
    inbox and stop the bootstrap partition from being read."""
    n = 20_000  # the inbox holds 4,096 records
    out = run_local(build(LocalSystem("local"), bootstrap=True, priorities={"profiles": -5}),
                    tmp_path, inputs(n))
    assert out[:n] == [["profiles", m] for m in range(n)] and len(out) == 3 * n
