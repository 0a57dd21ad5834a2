"""A function that returns the wrong type fails naming the operator, task, stream, partition and
offset, with the same words in every runner: a ``flat_map``/``async_flat_map`` returning a str,
bytes or dict (whose iteration would emit characters, bytes or keys), and a message that is not a
``KV`` sent to a keyed (``KVSerde``) output (which would need a key made up for it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import LocalRunner
from runtime.spark import ReprocessError, SparkRunner
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import SamzaError, TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem

SERDE = KVSerde(StringSerde(), JsonSerde())
MESSAGES = [KV(f"k{i}", {"n": i, "text": "hello"}) for i in range(5)]

#: mistake -> (operator id, what the error says about it); each fails on the message at offset 2
MISTAKES = {
    "str": ("mistake-str-1-flat_map-split",
            "flat_map 'mistake-str-1-flat_map-split' returned a str ('hello'), which would emit "
            "its characters one by one: return a list of messages"),
    "bytes": ("mistake-bytes-1-flat_map-split",
              "flat_map 'mistake-bytes-1-flat_map-split' returned a bytes (b'hello'), which "
              "would emit its bytes one by one: return a list of messages"),
    "dict": ("mistake-dict-1-async_flat_map-lookup",
             "async_flat_map 'mistake-dict-1-async_flat_map-lookup' returned a dict "
             "({'a': 1}), which would emit its keys one by one: return a list of messages"),
    "kv": ("mistake-kv-1-flat_map-split",
           "flat_map 'mistake-kv-1-flat_map-split' returned a KV (KV(key='k2', "),
    "not-kv": ("mistake-not-kv-1-send_to-1",
               "stream 'out' is keyed (KVSerde) but was sent a dict ({'n': 2, 'text': "
               "'hello'}): send KV(key, value) to it"),
}


def build(system: Any, mistake: str) -> StreamApplication:
    app = StreamApplication(f"mistake-{mistake}")
    inp = app.input(system.input("in", serde=SERDE, partitions=1))
    out = app.output(system.output("out", serde=SERDE, partitions=2))

    def split(kv: KV[str, Any]) -> Any:
        if kv.value["n"] != 2:
            return [kv]
        if mistake == "kv":
            return kv  # one message, not a list of them
        return kv.value["text"] if mistake == "str" else kv.value["text"].encode()

    async def lookup(kv: KV[str, Any]) -> Any:
        return {"a": 1} if kv.value["n"] == 2 else [kv]

    if mistake in ("str", "bytes", "kv"):
        inp.flat_map(split, name="split").send_to(out)
    elif mistake == "dict":
        inp.async_flat_map(lookup, name="lookup").send_to(out)
    else:
        inp.map(lambda kv: kv if kv.value["n"] != 2 else kv.value, name="unkey").send_to(out)
    return app


def check_streaming(err: BaseException, mistake: str) -> None:
    op_id, says = MISTAKES[mistake]
    assert isinstance(err, TaskError)
    assert (err.op_id, err.task, err.stream, err.partition, err.offset) == \
        (op_id, "Partition 0", "in", 0, 2)
    assert str(err).startswith(f"operator {op_id!r} failed in task 'Partition 0' on stream 'in' "
                               f"partition 0 offset 2: TypeError: {says}"), str(err)


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_test_runner(mistake: str) -> None:
    with pytest.raises(SamzaError) as info:
        TestRunner(build(MemorySystem(), mistake)).add_input("in", MESSAGES).run()
    check_streaming(info.value, mistake)


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_local_system(mistake: str, tmp_path: Path) -> None:
    runner = LocalRunner(build(LocalSystem("local"), mistake), {"job.dir": str(tmp_path / "job")},
                         inputs={"in": MESSAGES})
    with pytest.raises(SamzaError) as info:
        runner.run()
    check_streaming(info.value, mistake)


def test_spark(spark: Any) -> None:
    runner = SparkRunner(spark)
    for mistake, (op_id, says) in sorted(MISTAKES.items()):
        with pytest.raises(ReprocessError) as info:
            runner.reprocess(build(MemorySystem(), mistake), {"in": MESSAGES})
        assert str(info.value).startswith(
            f"operator {op_id!r} failed on stream 'in' (partition 0, row 2) in task "
            f"'Partition 0': TypeError: {says}"), str(info.value)


def test_lists_tuples_generators_and_none_are_outputs() -> None:
    app = StreamApplication("fine")
    mem = MemorySystem()
    inp = app.input(mem.input("in", serde=SERDE))
    out = app.output(mem.output("out", serde=SERDE))

    def gen(kv: KV[str, Any]) -> Any:
        yield kv

    async def agen(kv: KV[str, Any]) -> Any:
        yield kv

    inp.flat_map(lambda kv: (kv,), name="tuple").flat_map(gen, name="gen") \
        .flat_map(lambda kv: None if kv.value["n"] == 0 else [kv], name="none") \
        .async_flat_map(agen, name="agen").send_to(out)
    got = TestRunner(app).add_input("in", MESSAGES).run().messages("out")
    assert got == MESSAGES[1:]
