"""A stream-stream join's ports run like maps (``Operator.one_to_one_port``): each input's
batches go through the join and into its output in one loop, a one-partition in-memory output
included, with the same outputs and failures as message by message."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runtime.engine.task_wiring import TaskWiring as TaskInstance
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import TaskError
from samza_dsl.systems import MemorySystem


def join_app(combine: Any) -> tuple[StreamApplication, Any, Any, Any]:
    mem = MemorySystem()
    app = StreamApplication("jb")
    left = mem.input("left", partitions=1)
    right = mem.input("right", partitions=1)
    out = mem.output("joined")
    (app.input(left).join(app.input(right), key=lambda kv: kv.key, other_key=lambda kv: kv.key,
                          combine=combine, ttl=timedelta(minutes=10), name="j")
        .send_to(app.output(out)))
    return app, left, right, out


def batched_streams(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The streams a task builds a batch loop for, as the run goes."""
    built: list[str] = []
    original = TaskInstance._stream_batch

    def spy(self: TaskInstance, stream_id: str) -> Any:
        batch = original(self, stream_id)
        if batch is not None:
            built.append(stream_id)
        return batch
    monkeypatch.setattr(TaskInstance, "_stream_batch", spy)
    return built


def test_both_ports_run_in_batches_with_the_outputs_of_the_rule(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built = batched_streams(monkeypatch)

    def combine(a: KV[int, str], b: KV[int, str]) -> Any:
        return None if a.key % 5 == 0 else KV(a.key, a.value + b.value)

    app, left, right, out = join_app(combine)
    lefts = [KV(i, f"l{i}") for i in range(60)]
    rights = [KV(i, f"r{i}") for i in range(20, 100)]
    got = TestRunner(app).add_input(left, lefts).add_input(right, rights).run().messages(out)
    assert sorted(built) == ["left", "right"]
    # one message per key and side: whichever side comes second joins, in any interleaving
    assert sorted(got, key=lambda kv: kv.key) == [
        KV(k, f"l{k}r{k}") for k in range(20, 60) if k % 5]  # None results dropped, not sent


def test_a_failing_combine_in_a_batch_names_the_join_and_the_offset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built = batched_streams(monkeypatch)

    def combine(a: KV[int, str], b: KV[int, str]) -> Any:
        if b.value == "r7":
            raise ValueError("bad pair")
        return KV(a.key, a.value + b.value)

    app, left, right, _ = join_app(combine)
    runner = TestRunner(app).add_input(left, [KV(i, f"l{i}") for i in range(20)])
    runner.add_input(right, [KV(i, f"r{i}") for i in range(20)])
    with pytest.raises(TaskError) as err:
        runner.run()
    e = err.value
    assert "right" in built
    assert e.op_id is not None and e.op_id.endswith("join-j")
    assert isinstance(e.__cause__, ValueError)
    # r7 fails only if l7 came first; either way the failing message is the one named
    assert (e.stream, e.offset) in {("right", 7), ("left", 7)}
