"""One answer in every combination: the pipelines the reference model draws
(``tests/samza_dsl/test_reference_model.py``: map / filter / flat_map, an async step, 0-2
``partition_by`` hops, a merge, elasticity, ending in an event-time window of any kind with
triggers and a late stream, a stream-stream join or a stream-table join) run on every bounded
runner under both guarantees, and each run's committed outputs and late counts must be the
model's. ``test_reference_model`` covers ``TestRunner``, the embedded system in one container
and Spark; this module adds:

- the embedded local system in two container processes (``job.container.count=2``);
- Kafka with a static container (the broker of ``kafka_bootstrap``), its outputs read as a
  read_committed reader reads them (``committed_records``: by the log's markers);

each at least once and exactly once. Without a fault both guarantees give exactly the model's
outputs (docs/semantics.md, "One answer in every combination"). Faults, the consumer group and
its members are in ``test_matrix_faults.py``.

``SAMZA_DSL_MODEL_EXAMPLES=N`` draws N examples per combination instead of CI's few, with a
random seed instead of the fixed one (docs/testing.md, "The long mode").
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from kafka_helpers import create_topic, produce_each, run
from test_kafka_exactly_once import committed_records

from runtime import LocalRunner
from samza_dsl import AccumulationMode
from samza_dsl.systems import KafkaSystem, LocalSystem
from tests.samza_dsl.test_reference_model import APP, Case, build, cases, check, inputs

LONG = int(os.environ.get("SAMZA_DSL_MODEL_EXAMPLES", "0"))
#: examples per combination in CI (derandomized: the same ones every run)
EXAMPLES = LONG or 12
GUARANTEES = ["at-least-once", "exactly-once"]
#: exactly once, a stage reads what another container's tasks wrote once they commit: often
COMMIT_MS = 100
#: a run that waits (a bug) fails in this time, naming what it waits for
STALL_MS = 20_000


class Named:
    """A system whose streams get physical names of their own (``<id>-<tag>``), so that runs
    on one broker never share a topic."""

    def __init__(self, system: Any, tag: str) -> None:
        self.system = system
        self.tag = tag

    def input(self, sid: str, **kw: Any) -> Any:
        return self.system.input(sid, physical_name=f"{sid}-{self.tag}", **kw)

    def output(self, sid: str, **kw: Any) -> Any:
        return self.system.output(sid, physical_name=f"{sid}-{self.tag}", **kw)


def _settings(n: int = EXAMPLES) -> Any:
    return settings(max_examples=n, deadline=None, derandomize=not LONG, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def run_local_containers(case: Case, guarantee: str, containers: int = 2) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalRunner(build(case, LocalSystem("local")),
                            {"job.dir": tmp, "task.join.partition.check": "off",
                             "job.container.count": containers, "task.commit.ms": COMMIT_MS,
                             "job.bounded.stall.ms": STALL_MS,
                             "job.processing.guarantee": guarantee},
                            inputs=inputs(case)).run()
        try:
            check(case, local.messages, local.late_counts, case.fixed_per_key,
                  f"local x{containers} {guarantee}")
        finally:
            local.close()


def load_case(bootstrap: str, case: Case, tag: str) -> None:
    """The case's inputs into topics of their own, each message in the partition it names."""
    for sid, parts in inputs(case).items():
        topic = f"{sid}-{tag}"
        run(create_topic(bootstrap, topic, len(parts)))
        run(produce_each(bootstrap, topic, [
            (p, kv.key.encode(), json.dumps(kv.value).encode())
            for p, msgs in parts.items() for kv in msgs]))


def committed_json(bootstrap: str, topic: str) -> list[Any]:
    """The values of ``topic`` (one partition) a read_committed reader reads, decoded."""
    return [json.loads(v) for _, v in committed_records(bootstrap, topic, 1) if v is not None]


def as_model(counts: dict[str, dict[str, int]], name: str) -> dict[str, dict[str, int]]:
    """Late counts of an application named ``name``, by the ids the model names them with."""
    def plain(op_id: str) -> str:
        return op_id.replace(f"{name}-1-", f"{APP}-1-", 1)
    return {plain(w): {plain(s): n for s, n in by.items()} for w, by in counts.items()}


def run_kafka_static(bootstrap: str, case: Case, guarantee: str) -> None:
    tag = uuid.uuid4().hex[:8]
    name = f"model{tag}"  # the job's own topics (changelogs, intermediate streams) are its own
    load_case(bootstrap, case, tag)
    app = build(case, Named(KafkaSystem("kafka", bootstrap_servers=bootstrap), tag), name)
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(app, {"job.dir": tmp, "task.join.partition.check": "off",
                                   "task.commit.ms": COMMIT_MS,
                                   "job.bounded.stall.ms": STALL_MS,
                                   "job.processing.guarantee": guarantee}).run()
        try:
            late_counts = as_model(runner.late_counts, name)
        finally:
            runner.close()

    def messages(sid: str) -> list[Any]:
        return committed_json(bootstrap, f"{sid}-{tag}")
    check(case, messages, late_counts, case.fixed_per_key, f"kafka static {guarantee}")


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_local_system_in_two_containers_equals_the_model(guarantee: str) -> None:
    @_settings()
    @given(case=cases())
    def each(case: Case) -> None:
        run_local_containers(case, guarantee)
    each()


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_kafka_static_equals_the_model(kafka_bootstrap: str, guarantee: str) -> None:
    @_settings()
    @given(case=cases())
    def each(case: Case) -> None:
        run_kafka_static(kafka_bootstrap, case, guarantee)
    each()


#: found by this matrix: two hops at elasticity 2, exactly once, on Kafka. Six transactional
#: producers (one per virtual task) write each intermediate partition at once, and the test
#: broker made a later batch visible before an earlier one: the reader went past the earlier
#: one, an upstream task's end of stream among them, and the run waited for it forever (one run
#: in ten). Now a gap in an intermediate stream's offsets is fetched again
#: (``runtime.kafka.resolved.gapless``).
GAP_CASE = Case(
    data={0: [], 1: [("k2p1", 1500, 11), ("k2p1", 2250, 121), ("k0p1", 3000, 242),
                     ("k0p1", 2750, 303), ("k2p1", 5500, 437), ("k1p1", 5750, 514),
                     ("k2p1", 7250, 642), ("k0p1", 8750, 713)],
          2: [("k0p2", 250, 26), ("k2p2", 1500, 150), ("k1p2", 3750, 242), ("k0p2", 8000, 345),
              ("k1p2", 10000, 443), ("k1p2", 12500, 513), ("k1p2", 11500, 619),
              ("k1p2", 13500, 746), ("k2p2", 14500, 835)]},
    ops=("hop", "hop"), end="table", kind="keyed_tumbling", size_ms=2000, early=None, late=None,
    lateness_ms=0, mode=AccumulationMode.DISCARDING, declared=False, input_bound_ms=0,
    window_bound_ms=2000, elasticity=2, beyond=False)


def test_two_hops_at_elasticity_two_exactly_once_end(kafka_bootstrap: str) -> None:
    for _ in range(6):
        run_kafka_static(kafka_bootstrap, GAP_CASE, "exactly-once")
