"""Reprocessing on Spark gives the panes streaming gives for the same in-order input, whether the
event time is declared on the input or only on the window (docs/semantics.md rule 8)."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from runtime.spark import SparkRunner
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem
from samza_dsl.windows import Windows


def ts(kv: Any) -> float:
    return float(kv.value["ts"])


def app_of(declared: bool, hops: int, bound: timedelta | None = None) -> StreamApplication:
    """views (2 partitions) -> async step (partition 1 slow) -> ``hops`` partition_by -> a keyed
    10 s event-time window counting per user."""
    app = StreamApplication("spark-wm", config={"task.max.concurrency": 50})
    mem = MemorySystem()
    serde = KVSerde(StringSerde(), JsonSerde())
    kw: dict[str, Any] = {"event_time": ts} if declared else {}
    if declared and bound is not None:
        kw["max_out_of_orderness"] = bound
    views = app.input(mem.input("views", serde=serde, partitions=2, **kw))

    async def slow(kv: Any) -> list[Any]:
        await asyncio.sleep(0.002 if kv.value["p"] == 1 else 0)
        return [kv]

    stream = views.async_flat_map(slow, name="slow")
    for h in range(hops):
        stream = stream.partition_by(lambda kv: kv.value["user"], lambda kv: kv.value,
                                     serde=serde, name=f"hop{h}")
    wkw: dict[str, Any] = {} if declared or bound is None else {"max_out_of_orderness": bound}
    (stream.window(Windows.keyed_tumbling(lambda kv: kv.value["user"], timedelta(seconds=10),
                                          init=int, fold=lambda m, n: n + 1, event_time=ts,
                                          **wkw),
                   name="w")
     .map(lambda p: {"user": p.key.key, "start": p.key.pane_id, "n": p.message}, name="row")
     .send_to(app.output(mem.output("counts"))))
    return app


def inputs() -> dict[int, list[Any]]:
    return {p: [KV(f"u{p}-{i % 4}", {"user": f"u{p}-{i % 4}", "ts": 1000 + i * 0.5, "p": p})
                for i in range(200)] for p in range(2)}


def rows(result: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for r in result)


@pytest.mark.parametrize("hops", [0, 1, 2])
@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_spark_gives_the_panes_of_the_test_runner(spark: Any, declared: bool, hops: int) -> None:
    streaming = TestRunner(app_of(declared, hops)).add_input("views", inputs()).run(timeout=60)
    assert streaming.late() == 0
    result = SparkRunner(spark).reprocess(app_of(declared, hops), {"views": inputs()})
    got = rows(result.messages("counts"))
    assert got == rows(streaming.messages("counts"))
    assert sum(json.loads(r)["n"] * c for r, c in got.items()) == 400


@pytest.mark.parametrize("declared", [True, False], ids=["bound-on-input", "bound-on-window"])
def test_spark_equals_streaming_within_the_declared_out_of_orderness(spark: Any,
                                                                     declared: bool) -> None:
    rng = random.Random(5)
    messages = {p: [m for _, m in sorted(((m.value["ts"] + rng.uniform(0, 2.5), m)
                                          for m in msgs), key=lambda x: x[0])]
                for p, msgs in inputs().items()}
    bound = timedelta(seconds=3)
    streaming = TestRunner(app_of(declared, 1, bound)).add_input("views", messages).run(
        timeout=60)
    assert streaming.late() == 0
    result = SparkRunner(spark).reprocess(app_of(declared, 1, bound), {"views": messages})
    assert rows(result.messages("counts")) == rows(streaming.messages("counts"))
    assert result.late() == 0
