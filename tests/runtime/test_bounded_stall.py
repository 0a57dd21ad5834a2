"""A run without ``--follow`` never waits forever (``job.bounded.stall.ms``): with no progress for
half the bound it logs what each task waits for, and for all of it stops with an error naming
the partition, the offset its reader stands at and what holds it back (here: a message in
flight whose call never returns, with ``task.callback.timeout.ms`` off)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from runtime.runner import LocalRunner
from samza_dsl import StreamApplication
from samza_dsl.errors import ConfigError, SamzaError
from samza_dsl.serdes import JsonSerde
from samza_dsl.systems import LocalSystem


def hanging_app() -> StreamApplication:
    app = StreamApplication("stalls")
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))

    async def lookup(n: int) -> list[int]:
        if n == 3:
            await asyncio.Event().wait()  # nothing sets it
        return [n]

    inp.async_flat_map(lookup, name="lookup").send_to(
        app.output(local.output("out", serde=JsonSerde())))
    return app


def test_a_bounded_run_that_waits_on_a_hung_call_stops_and_names_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = {"job.dir": str(tmp_path / "job"), "job.bounded.stall.ms": 1200}
    runner = LocalRunner(hanging_app(), config, inputs={"in": list(range(6))})
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="runtime.engine.container"), \
            pytest.raises(SamzaError) as info:
        runner.run()
    assert time.monotonic() - began < 20
    text = str(info.value)
    assert "(job.bounded.stall.ms=1200) while it waited for" in text, text
    assert "task 'Partition 0' stream 'in' partition 0 (read to offset 6" in text, text
    assert ("1 message in flight, the oldest at stream 'in' partition 0 offset 3" in text
            and "stalls-1-async_flat_map-lookup" in text), text
    warned = [r.getMessage() for r in caplog.records if "no progress" in r.getMessage()]
    assert len(warned) == 1 and "offset 3" in warned[0], warned


def test_a_slow_bounded_run_that_moves_is_not_stopped(tmp_path: Path) -> None:
    app = StreamApplication("slow")
    local = LocalSystem("local")

    async def slow(n: int) -> list[int]:
        await asyncio.sleep(0.05)
        return [n]

    app.input(local.input("in", serde=JsonSerde(), partitions=1)).async_flat_map(
        slow, name="slow").send_to(app.output(local.output("out", serde=JsonSerde())))
    config = {"job.dir": str(tmp_path / "job"), "job.bounded.stall.ms": 200}
    runner = LocalRunner(app, config, inputs={"in": list(range(40))}).run()  # about 2 s
    assert sorted(runner.messages("out")) == list(range(40))


@pytest.mark.parametrize("value", [0, 99, -2])
def test_the_bound_is_checked(value: int) -> None:
    with pytest.raises(ConfigError, match="job.bounded.stall.ms"):
        LocalRunner(hanging_app(), {"job.bounded.stall.ms": value})


def test_a_task_holding_records_back_says_what_it_waits_for() -> None:
    """The stall report names records a task has not handed out, and the flag that holds them
    (a commit asked for that never ran would otherwise read as "nothing arrived")."""
    from types import SimpleNamespace

    from runtime.engine.in_flight import held_back_lines

    def task(**kw: object) -> SimpleNamespace:
        base = dict(name="Partition 1", done=False, inbox_size=0, _cur=None, commit_requested=False,
                    window_requested=False, held=None, env=SimpleNamespace(stopping=False),
                    in_flight=0, pending=[])
        base.update(kw)
        return SimpleNamespace(**base)

    lines = held_back_lines([task(inbox_size=3, commit_requested=True), task(name="idle"),
                             task(name="over", done=True, inbox_size=5)])
    assert lines == ["task 'Partition 1': 3 record(s) not handed out yet, behind a commit asked "
                     "for (0 in flight, 0 pending)",
                     "task 'idle': 0 record(s) not handed out yet (0 in flight, 0 pending)"]
