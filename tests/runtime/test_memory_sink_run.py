"""A function's messages into an in-memory stream that keeps them as they are (no serde) land
where the hand-out one message at a time puts them (``task.batch.handout=false``): a ``KV``
with a key in its key's partition, anything else where the stream's sender puts it, a None
dropped and counted."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import TaskError
from samza_dsl.systems import MemorySystem

PER_MESSAGE = {"task.batch.handout": False}


def shaped(kv: KV[int, int]) -> Any:
    """By the value: a KV keyed by the message's key, a KV with a None key, a bare value, or
    None; a value of -1 raises."""
    v = kv.value
    if v == -1:
        raise ValueError(f"bad value at key {kv.key}")
    return (KV(kv.key, v), KV(None, v), v, None)[v % 4]


def run(messages: list[KV[int, int]], partitions: int, config: dict[str, Any]
        ) -> tuple[dict[int, list[Any]], list[Any]]:
    app, mem = StreamApplication("shapes"), MemorySystem()
    ins, out = mem.input("in", partitions=2), mem.output("out", partitions=partitions)
    app.input(ins).map(shaped, name="shape").send_to(app.output(out))
    result = TestRunner(app, config).add_input(ins, {p: messages[p::2] for p in (0, 1)}).run()
    counts = sorted((labels["task"], name, n) for group, name, labels, n in result.metrics.samples()
                    if group == "operator" and name in ("messages-in", "messages-out"))
    return result.partitions(out), counts


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=3000), st.sampled_from([1, 4]))
def test_a_batch_into_memory_lands_as_one_message_at_a_time(values: list[int],
                                                             partitions: int) -> None:
    messages = [KV(i % 7, v) for i, v in enumerate(values)]
    assert run(messages, partitions, {}) == run(messages, partitions, PER_MESSAGE)


def test_a_failure_inside_a_batch_names_the_message_the_one_at_a_time_run_names() -> None:
    messages = [KV(i, i % 4) for i in range(2000)] + [KV(5, -1)]
    errors = []
    for config in ({}, PER_MESSAGE):
        with pytest.raises(TaskError) as err:
            run(messages, 4, config)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and "bad value at key 5" in errors[0]
