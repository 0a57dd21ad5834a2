"""An idle partition does not hold the watermark back forever (docs/semantics.md rule 8): with
``idle_timeout`` on the input, a following job on the embedded local system closes panes while
one of its input partitions has no data at all; without it, nothing closes until the job stops."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime import LocalRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


def ts(kv: KV[str, Any]) -> float:
    return float(kv.value["ts"])


def build(idle: timedelta | None, declared: bool) -> StreamApplication:
    app = StreamApplication("idle", config={"task.commit.ms": 200})
    local = LocalSystem("local")
    kw: dict[str, Any] = {"event_time": ts} if declared else {}
    if idle is not None:
        kw["idle_timeout"] = idle
    views = app.input(local.input("views", serde=SERDE, partitions=2, **kw))
    out = app.output(local.output("counts", serde=SERDE, partitions=1))
    (views.partition_by(lambda kv: kv.value["user"], lambda kv: kv.value, serde=SERDE,
                        name="by-user")
     .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                    fold=lambda m, n: n + 1, event_time=ts), name="w")
     .map(lambda p: KV(f"{p.key.key}@{p.key.pane_id}", p.message), name="record")
     .send_to(out))
    return app


# every message in partition 0 (its key's partition), partition 1 gets nothing
VIEWS = {0: [KV("u", {"user": "u", "ts": i * 0.5}) for i in range(100)]}  # 0 .. 49.5 s


def run_for(tmp_path: Path, app: StreamApplication, seconds: float,
            until: int | None = None) -> tuple[list[Any], list[Any]]:
    """(panes seen while running, panes after stopping)."""
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"views": VIEWS}, follow=True)
    runner.start()
    deadline = time.monotonic() + seconds
    seen: list[Any] = []
    try:
        while time.monotonic() < deadline and runner.status()["state"] != "running":
            time.sleep(0.01)
        while time.monotonic() < deadline:
            seen = runner.messages("counts")
            if until is not None and len(seen) >= until:
                break
            time.sleep(0.1)
    finally:
        runner.stop(timeout=60)
    return seen, runner.messages("counts")


@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_an_idle_partition_lets_the_window_close(tmp_path: Path, declared: bool) -> None:
    app = build(timedelta(milliseconds=300), declared)
    seen, _ = run_for(tmp_path, app, 60, until=4)
    # panes [0, 10) .. [30, 40) close on partition 0 alone; [40, 50) waits for later data
    assert {kv.key: kv.value for kv in seen} == {
        "u@0": 20, "u@10000": 20, "u@20000": 20, "u@30000": 20}


def test_without_an_idle_timeout_a_silent_partition_holds_the_window(tmp_path: Path) -> None:
    seen, after = run_for(tmp_path, build(None, True), 3)
    assert seen == [] and after == []


@pytest.mark.parametrize("containers", [1, 2])
@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_watermarks_cross_a_hop_while_the_job_runs(tmp_path: Path, declared: bool,
                                                    containers: int) -> None:
    """Both partitions busy, one of them slowed by an async call: the panes every producer has
    passed close while the job runs, with every message in them; with two containers the
    watermarks cross processes through the local log."""
    import asyncio

    app = StreamApplication("hop", config={"task.commit.ms": 200, "task.max.concurrency": 50})
    local = LocalSystem("local")
    views = app.input(local.input("views", serde=SERDE, partitions=2,
                                  **({"event_time": ts} if declared else {})))
    out = app.output(local.output("counts", serde=SERDE, partitions=1))

    async def slow(kv: KV[str, Any]) -> list[KV[str, Any]]:
        await asyncio.sleep(0.003 if kv.value["p"] == 1 else 0)
        return [kv]

    (views.async_flat_map(slow, name="slow")
     .partition_by(lambda kv: kv.value["user"], lambda kv: kv.value, serde=SERDE, name="by-user")
     .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                    fold=lambda m, n: n + 1, event_time=ts), name="w")
     .map(lambda p: KV(f"{p.key.key}@{p.key.pane_id}", p.message), name="record")
     .send_to(out))
    data = {p: [KV(f"u{p}", {"user": f"u{p}", "ts": i * 0.5, "p": p}) for i in range(100)]
            for p in range(2)}
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job"),
                               "job.container.count": containers},
                         inputs={"views": data}, follow=True)
    runner.start()
    deadline = time.monotonic() + 60
    seen: list[Any] = []
    try:
        while time.monotonic() < deadline and runner.status()["state"] != "running":
            time.sleep(0.01)
        while time.monotonic() < deadline and len(seen) < 8:
            seen = runner.messages("counts")
            time.sleep(0.1)
    finally:
        runner.stop(timeout=60)
    assert {kv.key: kv.value for kv in seen} == {
        f"u{p}@{s}": 20 for p in range(2) for s in (0, 10000, 20000, 30000)}
