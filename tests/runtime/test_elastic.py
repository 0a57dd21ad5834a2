"""Virtual tasks (docs/semantics.md rule 18): stable key buckets, per-key order, per-(partition,
bucket) checkpoints, factor changes between runs, broadcast inputs reaching every virtual task."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.hashing import murmur2, partition_for
from runtime import LocalRunner, TestRunner
from runtime.engine.elastic import bucket_function, rescale_checkpoints
from runtime.engine.job import SSP, build_job_model, container_tasks
from runtime.local.system import LocalJob
from samza_dsl import KV, Context, StreamApplication
from samza_dsl.errors import SamzaError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem

SERDE = KVSerde(StringSerde(), JsonSerde())


class Tag:
    """Emits KV(key, [task name, value]): which virtual task saw the message."""

    def init(self, ctx: Context) -> None:
        self.task = ctx.task_name

    def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
        return KV(kv.key, [self.task, kv.value])


def tag_app(system: Any, factor: int, partitions: int = 2, **config: Any) -> StreamApplication:
    app = StreamApplication("elastic", config={"job.elasticity.factor": factor,
                                               "task.commit.ms": 100, **config})
    inp = app.input(system.input("in", serde=SERDE, partitions=partitions))
    out = app.output(system.output("out", serde=SERDE, partitions=partitions))
    inp.map(Tag(), name="tag").send_to(out)
    return app


def test_the_job_model_splits_each_task_into_buckets() -> None:
    app = tag_app(MemorySystem(), 3)
    plan = app.plan()
    job = build_job_model(plan, {"in": 2, "out": 2}, 3)
    assert [t.name for t in job.tasks] == [f"Partition {p} bucket {b} of 3"
                                           for p in range(2) for b in range(3)]
    assert [(t.partition, t.bucket, t.index) for t in job.tasks] == [
        (p, b, p * 3 + b) for p in range(2) for b in range(3)]
    assert all(t.ssps == [SSP("in", t.partition)] for t in job.tasks)
    # dealt out to containers in task order, every task exactly once
    parts = [container_tasks(job, 4, i) for i in range(4)]
    assert sorted(t.name for p in parts for t in p) == sorted(t.name for t in job.tasks)
    assert [t.name for t in parts[1]] == [job.tasks[1].name, job.tasks[5].name]


def test_buckets_come_from_murmur2_independent_of_the_partition() -> None:
    app = tag_app(MemorySystem(), 4)
    job = build_job_model(app.plan(), {"in": 2, "out": 2}, 4)
    bucket = bucket_function(job, "in", 4)
    for i in range(200):
        key = f"user-{i}"
        h = murmur2(key.encode()) & 0x7FFFFFFF
        assert bucket(KV(key, 1), 0) == (h // 2) % 4
    # both buckets of each partition get keys (the bucket does not repeat the partition)
    seen = defaultdict(set)
    for i in range(200):
        key = f"user-{i}"
        h = murmur2(key.encode()) & 0x7FFFFFFF
        seen[h % 2].add(bucket(KV(key, 1), 0))
    assert seen[0] == seen[1] == {0, 1, 2, 3}
    assert bucket(KV(None, 1), 7) == 7 % 4  # no key: by offset


def test_the_bucket_hash_is_the_same_in_another_process() -> None:
    code = ("from runtime.engine.elastic import bucket_function\n"
            "from runtime.engine.job import build_job_model\n"
            "from samza_dsl import KV\n"
            "import test_elastic as t\n"
            "from samza_dsl.systems import MemorySystem\n"
            "job = build_job_model(t.tag_app(MemorySystem(), 4).plan(), {'in': 2, 'out': 2}, 4)\n"
            "b = bucket_function(job, 'in', 4)\n"
            "print([b(KV(f'k{i}', 0), 0) for i in range(50)])\n")
    root = Path(__file__).parents[2]
    env = {"PYTHONHASHSEED": "123", "PYTHONPATH": f"{root}:{Path(__file__).parent}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout
    job = build_job_model(tag_app(MemorySystem(), 4).plan(), {"in": 2, "out": 2}, 4)
    b = bucket_function(job, "in", 4)
    assert out.strip() == str([b(KV(f"k{i}", 0), 0) for i in range(50)])


@settings(max_examples=25, deadline=None)
@given(factor=st.integers(1, 4),
       messages=st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers()), max_size=80),
       concurrency=st.sampled_from([1, 4]))
def test_every_message_reaches_its_keys_virtual_task_in_order(
        factor: int, messages: list[tuple[str, int]], concurrency: int) -> None:
    app = tag_app(MemorySystem(), factor, **{"task.max.concurrency": concurrency})
    job = build_job_model(app.plan(), {"in": 2, "out": 2}, factor)
    bucket = bucket_function(job, "in", factor)
    parts: dict[int, list[KV[str, int]]] = {0: [], 1: []}
    for i, (k, _) in enumerate(messages):
        parts[partition_for(k.encode(), 2)].append(KV(k, i))
    result = TestRunner(app).add_input("in", parts).run()
    out = result.messages("out")
    assert sorted(m.value[1] for m in out) == list(range(len(messages)))
    by_key: dict[str, list[int]] = defaultdict(list)
    for m in out:
        by_key[m.key].append(m.value[1])
        p = (murmur2(m.key.encode()) & 0x7FFFFFFF) % 2
        b = bucket(m, 0)
        expected = f"Partition {p}" if factor == 1 else f"Partition {p} bucket {b} of {factor}"
        assert m.value[0] == expected
    for values in by_key.values():
        assert values == sorted(values)


def test_rescaling_checkpoints_inherits_on_split_and_takes_the_minimum_on_merge() -> None:
    plan = tag_app(MemorySystem(), 1).plan()
    s0 = SSP("in", 0)
    two = {"Partition 0 bucket 0 of 2": {s0: 10}, "Partition 0 bucket 1 of 2": {s0: 4}}
    four = rescale_checkpoints(build_job_model(plan, {"in": 1, "out": 1}, 4), 2, two)
    assert four == {"Partition 0 bucket 0 of 4": {s0: 10}, "Partition 0 bucket 1 of 4": {s0: 4},
                    "Partition 0 bucket 2 of 4": {s0: 10}, "Partition 0 bucket 3 of 4": {s0: 4}}
    four["Partition 0 bucket 2 of 4"] = {s0: 7}
    back = rescale_checkpoints(build_job_model(plan, {"in": 1, "out": 1}, 2), 4, four)
    assert back == {"Partition 0 bucket 0 of 2": {s0: 7}, "Partition 0 bucket 1 of 2": {s0: 4}}
    one = rescale_checkpoints(build_job_model(plan, {"in": 1, "out": 1}, 1), 2, two)
    assert one == {"Partition 0": {s0: 4}}
    # 2 -> 3: a bucket of 3 may hold keys of every bucket of 2
    three = rescale_checkpoints(build_job_model(plan, {"in": 1, "out": 1}, 3), 2, two)
    assert three == {f"Partition 0 bucket {b} of 3": {s0: 4} for b in range(3)}
    # a task that had not checkpointed a partition: the new one starts from the default
    partial = {"Partition 0 bucket 0 of 2": {s0: 10}}
    assert rescale_checkpoints(build_job_model(plan, {"in": 1, "out": 1}, 1), 2, partial) == {
        "Partition 0": {}}
    # same factor: nothing moves
    assert rescale_checkpoints(build_job_model(plan, {"in": 1, "out": 1}, 2), 2, two) == {}


def test_a_job_with_stores_keeps_its_factor(tmp_path: Path) -> None:
    app = StreamApplication("stateful", config={"job.elasticity.factor": 2})
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=SERDE, partitions=1))
    app.table("t", serde=SERDE)
    inp.sink(lambda m: None)
    job = build_job_model(app.plan(), {"in": 1}, 2)
    assert rescale_checkpoints(job, 1, {}) == {}  # a new job may start with any factor
    with pytest.raises(SamzaError, match=r"job.elasticity.factor changed from 1 to 2.*stores"):
        rescale_checkpoints(job, 1, {"Partition 0": {SSP("in", 0): 5}})
    # and runs with it, a store per virtual task
    config = {"job.dir": str(tmp_path / "job")}
    seeded = LocalJob(app, config, run=False)
    seeded.load("in", _events(0, 50))
    seeded.close()
    runner = LocalRunner(app, config).run()
    assert set(runner.job.state.restores) == {("Partition 0 bucket 0 of 2", "t"),
                                              ("Partition 0 bucket 1 of 2", "t")}
    runner.close()
    again = StreamApplication("stateful", config={"job.elasticity.factor": 1})
    again.input(local.input("in", serde=SERDE, partitions=1)).sink(lambda m: None)
    again.table("t", serde=SERDE)
    with pytest.raises(SamzaError, match=r"changed from 2 to 1"):
        LocalRunner(again, config).run()


def _events(start: int, n: int, keys: int = 100) -> list[KV[str, int]]:
    return [KV(f"k{i % keys}", i) for i in range(start, start + n)]


def test_changing_the_factor_between_runs_loses_nothing_and_keeps_key_order(
        tmp_path: Path) -> None:
    config = {"job.dir": str(tmp_path / "job")}
    local = LocalSystem("local")
    seen: dict[str, list[int]] = defaultdict(list)
    total = 0
    for run, factor in enumerate([1, 2, 4, 2]):
        app = tag_app(local, factor)
        job = LocalJob(app, config, run=False)  # more input for each run
        job.load("in", _events(total, 300))
        job.close()
        total += 300
        runner = LocalRunner(app, config).run()
        out = runner.messages("out")
        names = {m.value[0] for m in out}
        expected = ({f"Partition {p}" for p in range(2)} if factor == 1 else
                    {f"Partition {p} bucket {b} of {factor}" for p in range(2)
                     for b in range(factor)})
        assert names == expected, run
        for m in out:
            seen[m.key].append(m.value[1])
        checkpoints = runner.job.checkpoints.tasks()
        runner.close()
        assert {n for n in checkpoints if n in expected} == expected
    # every message, each key's in order (a merged task may replay a little: at-least-once)
    assert {v for vs in seen.values() for v in vs} == set(range(total))
    for key, values in seen.items():
        deduped = [v for i, v in enumerate(values) if v not in values[:i]]
        assert deduped == sorted(deduped), key


def test_broadcast_inputs_reach_every_virtual_task() -> None:
    app = StreamApplication("bc", config={"job.elasticity.factor": 2})
    mem = MemorySystem()
    inp = app.input(mem.input("in", serde=SERDE, partitions=2))
    rules = app.input(mem.input("rules", serde=SERDE, partitions=1))
    out = app.output(mem.output("out", serde=SERDE, partitions=1))
    got = rules.broadcast(name="bcast")
    got.map(Tag(), name="tag").send_to(out)
    inp.sink(lambda m: None, name="drop")
    result = TestRunner(app).add_input("in", {0: [], 1: []}).add_input(
        "rules", {0: [KV("r", 1), KV("r", 2)]}).run()
    names = sorted(m.value[0] for m in result.messages("out"))
    assert names == sorted(f"Partition {p} bucket {b} of 2" for p in range(2) for b in range(2)
                           for _ in range(2))
