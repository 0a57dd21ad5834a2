"""Event time with virtual tasks (docs/semantics.md rules 8 and 18): a virtual task's progress in a
partition is the partition's progress. The messages of the other key buckets advance it too, at
their own offsets, whether the event time is declared on the input or only on the window, so a
bucket that gets none of a partition's messages does not hold the watermark back, and which
messages are late does not depend on the elasticity factor."""

from __future__ import annotations

import asyncio
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


def ts(kv: KV[str, Any]) -> float:
    return float(kv.value["ts"])


async def same(kv: KV[str, Any]) -> list[KV[str, Any]]:
    await asyncio.sleep(0)
    return [kv]


def hop_app(system: Any, factor: int, declared: bool, async_step: bool) -> StreamApplication:
    app = StreamApplication("ew", config={"task.commit.ms": 200,
                                          "job.elasticity.factor": factor})
    views = app.input(system.input("views", serde=SERDE, partitions=1,
                                   event_time=ts if declared else None))
    out = app.output(system.output("counts", serde=SERDE, partitions=1))
    if async_step:
        views = views.async_flat_map(same, name="same")
    (views.partition_by(lambda kv: kv.value["user"], lambda kv: kv.value, serde=SERDE,
                        name="by-user")
     .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                    fold=lambda m, n: n + 1, event_time=ts), name="w")
     .map(lambda p: KV(f"{p.key.key}@{p.key.pane_id}", p.message), name="record")
     .send_to(out))
    return app


# one key: every message in one bucket, the other virtual task gets none of them
VIEWS = {0: [KV("u", {"user": "u", "ts": i * 0.5}) for i in range(100)]}  # 0 .. 49.5 s


@pytest.mark.parametrize("async_step", [False, True], ids=["hop", "async-hop"])
@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_a_bucket_without_messages_lets_the_window_close_while_following(
        tmp_path: Path, declared: bool, async_step: bool) -> None:
    app = hop_app(LocalSystem("local"), 2, declared, async_step)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"views": VIEWS},
                         follow=True)
    runner.start()
    deadline = time.monotonic() + 30
    seen: list[Any] = []
    try:
        while time.monotonic() < deadline and runner.status()["state"] != "running":
            time.sleep(0.01)
        while time.monotonic() < deadline and len(seen) < 4:
            seen = runner.messages("counts")
            time.sleep(0.1)
    finally:
        runner.stop(timeout=60)
    # [0, 10) .. [30, 40) close while the job runs; [40, 50) waits for later data
    assert {kv.key: kv.value for kv in seen} == {
        "u@0": 20, "u@10000": 20, "u@20000": 20, "u@30000": 20}


def direct_app(factor: int, declared: bool) -> tuple[StreamApplication, Any]:
    mem = MemorySystem()
    app = StreamApplication("ed", config={"job.elasticity.factor": factor})
    views = app.input(mem.input("views", serde=SERDE, partitions=1,
                                event_time=ts if declared else None))
    out = app.output(mem.output("counts", serde=JsonSerde(), partitions=1))
    (views.window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=2),
                                         event_time=ts), name="w")
     .map(lambda p: [p.key.key, p.key.pane_id, [kv.value["ts"] for kv in p.message]],
          name="record")
     .send_to(out))
    return app, out


def buckets_of(keys: list[str]) -> set[int]:
    from runtime.engine.elastic import bucket_function
    from runtime.engine.job import build_job_model

    app, _ = direct_app(2, False)
    job = build_job_model(app.plan(), {"views": 1, "counts": 1}, 2)
    bucket = bucket_function(job, "views", 2)
    return {bucket(KV(k, {}), 0) for k in keys}


@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
@pytest.mark.parametrize("factor", [1, 2])
def test_which_messages_are_late_does_not_depend_on_the_factor(declared: bool,
                                                              factor: int) -> None:
    """b1@2 s then a0@0 s in one partition, no bound: a0 is late, whether or not b1 is in its
    virtual task's key bucket."""
    assert buckets_of(["a0", "b1"]) == {0, 1}  # two buckets: the case of the test
    app, out = direct_app(factor, declared)
    data = {0: [KV("b1", {"ts": 2.0}), KV("a0", {"ts": 0.0})]}
    result = TestRunner(app).add_input("views", data).run(timeout=60)
    assert result.late_counts == {"ed-1-window-w": {"views": 1}}
    assert result.messages(out) == [["b1", "2000", [2.0]]]
