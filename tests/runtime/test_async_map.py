"""``async_map`` (``map_async``): an async one-to-one function, with ``async_flat_map``'s
concurrency, ordering and checkpoint rules (its checkpoints: ``tests/runtime/test_checkpoint.py``,
run for both), giving the plain-Python answer on TestRunner, the embedded local system and
Spark (Kafka: ``tests/kafka/test_kafka_async_map.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from runtime.spark import SparkRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import SamzaError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner
from tests.runtime.two_runners import RUNNERS, run_on

SERDE = KVSerde(StringSerde(), JsonSerde())
PARTITIONS = 3


def inputs() -> dict[str, dict[int, list[KV[str, Any]]]]:
    """Each key in one partition, 40 messages a partition, values counting up per key."""
    parts: dict[int, list[KV[str, Any]]] = {p: [] for p in range(PARTITIONS)}
    for i in range(120):
        key = f"k{i % 9}"
        parts[(i % 9) % PARTITIONS].append(KV(key, {"n": i, "v": i // 9}))
    return {"in": parts}


async def priced(kv: KV[str, Any]) -> KV[str, Any] | None:
    """Later messages finish first (so completions overtake); every 5th gives no output."""
    await asyncio.sleep((3 - kv.value["n"] % 4) * 0.002)
    if kv.value["n"] % 5 == 0:
        return None
    return KV(kv.key, {"v": kv.value["v"], "price": kv.value["n"] * 10})


def build(system: Any, ordering: str = "key", tag: str = "") -> StreamApplication:
    """in -> async_map -> partition_by -> out (``tag``: the streams' suffix, ``in-<tag>``)."""
    app = StreamApplication(f"asyncmap{tag}", config={"task.max.concurrency": 8})
    suffix = f"-{tag}" if tag else ""
    (app.input(system.input(f"in{suffix}", serde=SERDE, partitions=PARTITIONS))
     .async_map(priced, name="price", ordering=ordering)
     .partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=SERDE, name="bykey")
     .send_to(app.output(system.output(f"out{suffix}", serde=SERDE, partitions=1))))
    return app


def expected() -> dict[str, list[dict[str, Any]]]:
    """Per key, the outputs in input order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for parts in inputs()["in"].values():
        for kv in parts:
            if kv.value["n"] % 5:
                out.setdefault(kv.key, []).append({"v": kv.value["v"],
                                                   "price": kv.value["n"] * 10})
    return out


def per_key(messages: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for kv in messages:
        out.setdefault(kv.key, []).append(kv.value)
    return out


@pytest.mark.parametrize("runner", RUNNERS)
def test_async_map_gives_each_keys_outputs_in_order(runner: str, tmp_path: Path) -> None:
    assert per_key(run_on(runner, build, inputs(), tmp_path)) == expected()


def test_spark_gives_the_same_outputs(spark: Any) -> None:
    result = SparkRunner(spark).reprocess(build(MemorySystem()), inputs())
    assert per_key(result.messages("out")) == expected()


def test_completions_overtake_without_key_ordering_and_no_message_is_lost() -> None:
    test = TestRunner(build(MemorySystem(), ordering="none"))
    test.add_input("in", inputs()["in"])
    got = per_key(test.run(timeout=60).messages("out"))
    assert {k: sorted(v, key=lambda d: d["price"]) for k, v in got.items()} == expected()
    assert got != expected()  # later messages finish first: some key's order changed


def test_calls_run_concurrently_up_to_the_tasks_limit() -> None:
    running = peak = 0

    async def slow(m: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.005)
        running -= 1
        return m * 2

    mem = MemorySystem()
    app = StreamApplication("conc", config={"task.max.concurrency": 4})
    app.input(mem.input("in")).map_async(slow, name="slow").send_to(
        app.output(mem.output("out")))
    out = TestRunner(app).add_input("in", list(range(40))).run(timeout=30).messages("out")
    assert sorted(out) == [m * 2 for m in range(40)]
    assert peak == 4


def test_the_plan_names_it_async_map() -> None:
    app = build(MemorySystem())
    (op,) = [o for o in app.spec().operators if o.op_id.endswith("-price")]
    assert "-async_map-" in op.op_id
    assert "async_map price" in app.plan(partitions={"in": PARTITIONS}).to_text()


def test_an_async_iterable_result_fails_naming_the_operator() -> None:
    async def many(m: int) -> Any:
        yield m

    mem = MemorySystem()
    app = StreamApplication("gen")
    app.input(mem.input("in")).async_map(many, name="many").send_to(
        app.output(mem.output("out")))
    with pytest.raises(SamzaError) as info:
        TestRunner(app).add_input("in", [1]).run(timeout=30)
    assert "async_map 'gen-1-async_map-many' returned an async iterable" in str(info.value)
    assert "use async_flat_map" in str(info.value)


@pytest.mark.parametrize(("kw", "message"), [
    ({"ordering": "fifo"}, "async_map ordering must be one of"),
    ({"key": len}, "async_map(key=...) goes with ordering='key'"),
])
def test_bad_arguments_are_refused(kw: dict[str, Any], message: str) -> None:
    mem = MemorySystem()
    app = StreamApplication("bad")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        app.input(mem.input("in")).async_map(priced, **kw)
