"""A task's event-time progress goes with its checkpoint (docs/semantics.md, "Event time and
watermarks", Across a restore): a job on the embedded local system merges inputs ``a`` and
``b`` into a 10 s tumbling window. Its first run (``--follow``) reads all of ``a``, the last
message far ahead, while ``b`` has nothing, and stops. Then ``b`` gets its messages and the job
runs again: it closes the first pane, although ``a`` brings nothing new. Before, the second run
knew nothing of ``a``'s progress and held every window back until ``a`` got new data."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from runtime import LocalRunner
from runtime.engine.watermarks import TaskClock
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


def _t(kv: Any) -> float:
    return float(kv.value["t"])


def _app() -> StreamApplication:
    app = StreamApplication("resume-progress", config={"task.commit.ms": 50})
    local = LocalSystem("local")
    a = app.input(local.input("a", serde=SERDE, partitions=1, event_time=_t))
    b = app.input(local.input("b", serde=SERDE, partitions=1, event_time=_t))
    out = app.output(local.output("out", serde=JsonSerde(), partitions=1))
    (a.merge(b, name="m")
     .window(Windows.tumbling(timedelta(seconds=10), event_time=_t), name="w")
     .map(lambda p: {"pane": p.key.pane_id, "n": len(p.message)}, name="row")
     .send_to(out))
    return app


def _follow(job_dir: Path, inputs: dict[str, list[Any]], until: Any) -> list[Any]:
    runner = LocalRunner(_app(), {"job.dir": str(job_dir)}, inputs=inputs, follow=True).start()
    try:
        deadline = time.monotonic() + 30
        while not until(runner) and time.monotonic() < deadline:
            time.sleep(0.05)
        runner.stop()
        assert runner.wait(timeout=30)
        return list(runner.messages("out"))
    finally:
        runner.close()


def _wrote(runner: LocalRunner) -> bool:
    try:
        return bool(runner.messages("out"))
    except KeyError:  # not started yet
        return False


def test_a_restart_goes_on_from_the_progress_its_checkpoint_holds(tmp_path: Path) -> None:
    a = [KV("x", {"t": t}) for t in (1, 2, 3, 100)]
    b = [KV("y", {"t": t}) for t in (5, 6, 101)]
    first = _follow(tmp_path, {"a": a, "b": []}, lambda r: r.status()["processed"] >= 4)
    assert first == []  # b holds the window back: nothing of it yet
    second = _follow(tmp_path, {"b": b}, _wrote)
    assert second == [{"pane": "0", "n": 5}]


def test_a_snapshot_comes_back_whole_and_a_foreign_one_is_ignored(tmp_path: Path) -> None:
    from runtime.engine.job import SSP, build_job_model

    app = _app()
    plan = app.plan()
    job = build_job_model(plan, {sid: 1 for sid in plan.streams}, 1)
    model = job.tasks[0]
    clock = TaskClock(model, job)
    clock.apply(SSP("a", 0), 100.0)
    clock.apply(SSP("b", 0), 7.0)
    snap = clock.snapshot()
    again = TaskClock(model, job)
    again.restore(snap)
    assert again.progress == clock.progress and again.progress
    foreign = TaskClock(model, job)
    foreign.restore({"p": [["a", 0, "not a time"]]})
    foreign.restore("nothing of this code")
    assert foreign.progress == {}
