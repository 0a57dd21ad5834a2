"""One answer in every combination: the pipelines the reference model draws
(``tests/samza_dsl/test_reference_model.py``: map / filter / flat_map, an async step, 0-2
``partition_by`` hops, a broadcast, a merge, elasticity, ending in an event-time window of any
kind with triggers, a late stream and an async step after it, a stream-stream join on
processing time or on event time (``within=``, inner or left), a stream-table join, a running count in a changelogged table or a lookup in a side-input table)
run on every runner under both guarantees, and each run's committed outputs (and late counts,
where the run ends) must be the model's. ``test_reference_model`` covers ``TestRunner``, the
embedded system in one container and Spark; this module adds:

- the embedded local system in two container processes (``job.container.count=2``);
- Kafka with a static container (the broker of ``kafka_bootstrap``), its outputs read as a
  read_committed reader reads them (``committed_records``: by the log's markers);
- the consumer group: 1, 2 and 3 ``samza-dsl run --follow`` members with job.dirs of their own,
  the input written while they run, and exactly once under two member kills (SIGKILL at seeded
  times, a new member in each one's place) while it is written;
- exactly once under SIGKILL at three seeded fault points per run (a processed batch, a step of
  a commit: ``runtime.engine.faults``) on the local system and on Kafka static, each run a bounded
  ``samza-dsl run`` process, until a last run finishes;

each at least once and exactly once where the runner has both. Without a fault both guarantees
give exactly the model's outputs (docs/semantics.md, "One answer in every combination"). Faults
of fixed shapes in the group (freezes, churn, at-least-once kills) are in
``test_matrix_faults.py``.

``SAMZA_DSL_MODEL_EXAMPLES=N`` draws N examples per combination instead of CI's few, with a
random seed instead of the fixed one (docs/testing.md, "The long mode").
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from group_helpers import APPS, Member, kill_left, stop_all, wait_for
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from kafka_helpers import create_topic, produce_each, run, topics
from model_case import app_name, case_to_json, model_app, model_local_app
from test_kafka_exactly_once import committed_records

from operators.hashing import partition_for
from runtime import LocalRunner
from runtime.engine.faults import KAFKA_TXN_POINTS, TXN_POINTS
from runtime.kafka.admin import describe_topics
from runtime.kafka.committed import log_batches
from runtime.local.system import LocalJob
from samza_dsl import AccumulationMode
from samza_dsl.systems import LocalSystem
from samza_dsl.testing.apache_kafka import ApacheKafkaBroker, ApacheKafkaCluster
from tests.proc_helpers import finish
from tests.samza_dsl.test_reference_model import (
    APP,
    Case,
    build,
    cases,
    check,
    comparable,
    inputs,
    late_value,
    main_inputs,
    model,
    model_rows,
    rows_of,
)

ROOT = Path(__file__).resolve().parents[2]
LONG = int(os.environ.get("SAMZA_DSL_MODEL_EXAMPLES", "0"))
#: examples per combination in CI (derandomized: the same ones every run)
EXAMPLES = LONG or 12
#: examples per combination of the consumer group (processes of their own: slower)
GROUP_EXAMPLES = LONG or 3
#: drawn cases a restarted broker runs (Apache Kafka only)
RESTART_EXAMPLES = LONG or 2
#: at least once, a member's session outlasts the broker's restart (a start under load takes
#: up to about 20 s)
RESTART_SESSION_MS = 45_000
#: the long mode runs as long as its number asks
pytestmark = [pytest.mark.timeout(0)] if LONG else []
GUARANTEES = ["at-least-once", "exactly-once"]
#: exactly once, a stage reads what another container's tasks wrote once they commit: often
COMMIT_MS = 100
#: a run that waits (a bug) fails in this time, naming what it waits for
STALL_MS = 20_000


def _settings(n: int = EXAMPLES, shrink: bool = True) -> Any:
    """``shrink=False`` for runs of processes: a failing case is reported as drawn, not made
    smaller by running it again and again."""
    return settings(max_examples=n, deadline=None, derandomize=not LONG, database=None,
                    phases=list(Phase) if shrink else [Phase.explicit, Phase.generate],
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


def produce(bootstrap: str, topic: str, messages: list[tuple[int, Any]]) -> None:
    """``(partition, KV)`` pairs into ``topic``, each in the partition it names, in order."""
    run(produce_each(bootstrap, topic, [(p, kv.key.encode(), json.dumps(kv.value).encode())
                                        for p, kv in messages]))


def load_case(bootstrap: str, case: Case, tag: str) -> None:
    """The case's inputs into topics of their own, each message in the partition it names."""
    for sid, parts in inputs(case).items():
        topic = f"{sid}-{tag}"
        run(create_topic(bootstrap, topic, len(parts)))
        produce(bootstrap, topic, [(p, kv) for p, msgs in parts.items() for kv in msgs])


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
    name = app_name(tag)
    load_case(bootstrap, case, tag)
    app = model_app(bootstrap, tag, case)
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
    @example(case=ETJOIN_LEFT_CASE)
    @example(case=ETJOIN_WINDOW_CASE)
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


#: the event-time join, left: the unmatched left messages (even values) come out as their
#: key's watermark passes them + 1 s (in a group run, the flush messages move it), after a hop
#: at elasticity 2; input 1 s out of order at most
ETJOIN_LEFT_CASE = Case(
    data={0: [("k0p0", 0, 10), ("k0p0", 500, 21), ("k1p0", 1750, 32), ("k0p0", 750, 41),
              ("k0p0", 4000, 50), ("k1p0", 3000, 63), ("k1p0", 4250, 71)],
          1: [("k0p1", 750, 11), ("k0p1", 1500, 22), ("k2p1", 2000, 30), ("k2p1", 3250, 45),
              ("k0p1", 2500, 64)]},
    ops=("filter", "hop"), end="etjoin", kind="keyed_tumbling", size_ms=2000, early=None,
    late=None, lateness_ms=0, mode=AccumulationMode.DISCARDING, declared=True,
    input_bound_ms=1000, window_bound_ms=0, elasticity=2, beyond=False, within_ms=1000,
    how="left")


#: the same, its pairs then counted per key in 2 s panes of the left message's time: the pairs
#: come out of event-time order by up to the join's within and the inputs' bound, which the
#: window allows (docs/semantics.md, rule 9), so none is late
ETJOIN_WINDOW_CASE = dataclasses.replace(ETJOIN_LEFT_CASE, then_window=True)


def test_two_hops_at_elasticity_two_exactly_once_end(kafka_bootstrap: str) -> None:
    for _ in range(6):
        run_kafka_static(kafka_bootstrap, GAP_CASE, "exactly-once")


#: found by this matrix: two merged inputs with a 20 ms ``idle_timeout``, on Kafka. A partition
#: whose first fetch came after the timeout was taken as idle although the broker held its
#: records: the watermark went on without it, and its messages (within every bound) were late,
#: in two runs of three. A partition whose reader has records of it still to read is not idle
#: (``Consumer.behind``).
IDLE_CASE = Case(
    data={0: [("k0", 500, 37), ("k0", 1250, 123), ("k2", 5000, 234), ("k2", 3500, 337),
              ("k0", 8500, 436)],
          1: [("k0", 0, 17), ("k2", 2250, 127), ("k1", 2500, 203), ("k1", 5000, 311),
              ("k2", 6500, 405), ("k0", 6250, 541), ("k0", 8750, 607), ("k2", 10250, 727),
              ("k0", 11250, 800), ("k2", 12000, 945)]},
    ops=("async", "flat_map", "hop", "map", "filter"), end="window", kind="keyed_hopping",
    size_ms=2000, early="any3", late="count1", lateness_ms=0, mode=AccumulationMode.DISCARDING,
    declared=True, input_bound_ms=0, window_bound_ms=2000, elasticity=2, beyond=False,
    async_order="key", shared_keys=True, idle_timeout_ms=20,
    merged={0: [("k0", 0, 7), ("k2", 3250, 127), ("k1", 4500, 210), ("k2", 6500, 317),
                ("k2", 8750, 428), ("k0", 11500, 545), ("k0", 13250, 606), ("k0", 13500, 741),
                ("k2", 16000, 827), ("k1", 15500, 931), ("k1", 18000, 1030)],
            1: [("k1", 0, 36), ("k1", 0, 147), ("k0", 0, 224), ("k1", 1000, 339),
                ("k2", 4250, 428)]},
    hop_ms=1000, combine=True)


def test_a_partition_not_fetched_yet_is_not_idle(kafka_bootstrap: str) -> None:
    for _ in range(3):
        run_kafka_static(kafka_bootstrap, IDLE_CASE, "exactly-once")


# -- the consumer group ------------------------------------------------------------------------------
#
# Members are ``samza-dsl run --follow`` processes with their own job.dir (``group_helpers``), so
# no input ends: each input partition gets, after its messages, one message per virtual task
# with an event time far past every other (``with_flush``). It moves every watermark past every
# pane, as the end of a bounded run would close them; the model runs with these messages too,
# and whatever they cause themselves (their own panes, join results) is left out of both sides.

#: the event time (ms) of the messages that close every pane in a run that does not end
FLUSH_T = 987_654_321


def flush_keys(partitions: int, elasticity: int) -> dict[int, list[str]]:
    """Per partition of a stream, a key for each virtual task (bucket) of it."""
    keys: dict[int, list[str]] = {p: [] for p in range(partitions)}
    want = partitions * elasticity
    i = 0
    while sum(map(len, keys.values())) < want:
        key = f"flush{i}"
        slot = partition_for(key.encode(), partitions * elasticity)
        p, b = slot % partitions, slot // partitions
        if len(keys[p]) == b:  # buckets in order: one key for each
            keys[p].append(key)
        i += 1
    return keys


def with_flush(case: Case) -> Case:
    """The case with a last message on each input partition, one per virtual task, at
    ``FLUSH_T``; values of 2 mod 3 pass every op of the grammar (a map keeps them so, a filter
    keeps them, a flat_map keeps the message itself). No idle timeout: a run that does not end
    has no empty partition to wait on."""
    def flushed(data: dict[int, list[tuple[str, int, int]]]) -> dict[int, list[Any]]:
        keys = flush_keys(len(data), case.elasticity)
        return {p: [*msgs, *((k, FLUSH_T, 2) for k in keys[p])] for p, msgs in data.items()}
    return dataclasses.replace(case, data=flushed(case.data), idle_timeout_ms=0,
                               merged=flushed(case.merged) if case.merged else {})


def untriggered(case: Case) -> Case:
    """The case without early and late triggers, for runs with kills at least once: a replay
    after a kill counts its messages again in the triggers of the panes it reaches, so early
    and late panes may come at other messages (docs/semantics.md, "One answer in every
    combination"). Exactly once, trigger progress is part of the window's stored state and a
    restore goes on from it: those runs keep their triggers."""
    return dataclasses.replace(case, early=None, late=None)


def unflushed(items: list[Any]) -> list[Any]:
    """``items`` but those the flush messages caused (a pane or result that holds one)."""
    return [o for o in items if str(FLUSH_T) not in json.dumps(o, default=repr)]


def _same(got: Counter[Any], want: Counter[Any], repeats: bool) -> bool:
    """Whether ``got`` is ``want``; with ``repeats`` (at least once, with faults), each of
    ``want`` at least as often, and nothing that ``want`` has not."""
    if not repeats:
        return got == want
    return set(got) == set(want) and all(got[o] >= n for o, n in want.items())


def group_difference(case: Case, out: list[Any], late: list[Any],
                     repeats: bool = False) -> str | None:
    """How a group run's outputs differ from the model's (rules as ``check``'s), or None.
    ``repeats``: at least once with kills, an output may repeat with the model's value
    (docs/semantics.md, "Replays applied once")."""
    expected, _, late_messages = model(case)
    if case.end != "window":
        got, want = Counter(map(json.dumps, unflushed(out))), Counter(
            map(json.dumps, unflushed(expected)))
        return None if _same(got, want, repeats) else \
            f"results differ: missing {list((want - got).items())[:4]}, " \
            f"extra {list((got - want).items())[:4]}"
    if not _same(Counter(map(late_value, late)),
                 Counter((m.value["t"], m.value["v"]) for m in late_messages), repeats):
        return "late_to got other messages than the model's late ones"
    fixed = case.fixed_per_key
    rows = [r for r in rows_of(out) if not any(t == FLUSH_T for t, _ in r[3])]
    want_rows = [r for r in model_rows(expected) if not any(t == FLUSH_T for t, _ in r[3])]
    if repeats:  # a pane emitted again is the same row: as many as the model's, no more
        want_n, got_n = Counter(want_rows), Counter(rows)
        rows = [r for r, k in got_n.items() for _ in range(min(k, want_n[r]) or k)]
    got_c, want_c = comparable(rows, case, fixed), comparable(want_rows, case, fixed)
    if got_c == want_c:
        return None
    return "panes differ: " + "; ".join(
        f"{what}: missing {list((want_c[what] - got_c.get(what, Counter())).items())[:3]}, "
        f"extra {list((got_c.get(what, Counter()) - want_c[what]).items())[:3]}"
        for what in want_c)


def run_kafka_group(bootstrap: str, tmp: Path, case: Case, guarantee: str, members: int,
                    kills: int = 0, seed: int = 0, wait: float = 60,
                    broker: ApacheKafkaCluster | None = None) -> None:
    """The case run by ``members`` group members; with ``kills``, the input comes in
    ``kills + 1`` parts and after each but the last a member is killed (SIGKILL, at a seeded
    time after the part) and another one started in its place; with ``broker`` (the cluster
    at ``bootstrap``, one node), its broker is killed instead (SIGKILL: its data stays on disk)
    and started again."""
    tag = uuid.uuid4().hex[:8]
    case = with_flush(untriggered(case) if kills and guarantee != "exactly-once" else case)
    rng = random.Random(seed)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "case.json").write_text(case_to_json(case))
    for sid, parts in inputs(case).items():
        run(create_topic(bootstrap, f"{sid}-{tag}", len(parts)))
    side = {sid: parts for sid, parts in inputs(case).items() if sid not in main_inputs(case)}
    for sid, parts in side.items():  # a side input is there before the job starts: read whole
        produce(bootstrap, f"{sid}-{tag}", [(p, kv) for p, msgs in parts.items() for kv in msgs])
    args = ("-c", f"job.processing.guarantee={guarantee}", "-c", f"task.commit.ms={COMMIT_MS}",
            "-c", "task.join.partition.check=off")  # a case places each message itself
    if broker is not None and guarantee != "exactly-once":
        # at least once, the outputs are the model's each once only if the member keeps its
        # tasks through the outage: a session longer than it (a restarted coordinator gives
        # each member a new session from its load). Fenced, its tasks would go on from their
        # checkpoints, and what they did after them would come again (docs/semantics.md, "One
        # answer in every combination"). Exactly once runs with the short session: fenced by
        # the outage, its tasks restore and the outputs are still the model's, each once.
        # And an idempotent producer: a send the broker took just before it died, sent again
        # after, is not written twice (docs/kafka.md, "A broker that restarts").
        args += ("-c", f"systems.kafka.consumer.session.timeout.ms={RESTART_SESSION_MS}",
                 "-c", "systems.kafka.consumer.heartbeat.interval.ms=1000",
                 "-c", "systems.kafka.producer.enable.idempotence=true")
    env = {"SAMZA_TEST_CASE": str(tmp / "case.json")}
    started = 0

    def member() -> Member:
        nonlocal started
        started += 1
        return Member(tmp / f"m{started}", bootstrap, tag, *args, app="model", env=env)
    ms = [member() for _ in range(members)]
    what = f"group of {members}, {guarantee}, {kills} kill(s) (seed {seed}): {case}"
    try:
        wait_for("the group settled", lambda: same_generation(ms), 60, ms)
        records = [(sid, p, kv) for sid, parts in main_inputs(case).items()
                   for p, msgs in parts.items() for kv in msgs]
        cuts = sorted(rng.randrange(len(records) + 1) for _ in range(kills))
        for part, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(records)], strict=True)):
            for sid in main_inputs(case):
                produce(bootstrap, f"{sid}-{tag}",
                        [(p, kv) for s, p, kv in records[a:b] if s == sid])
            if part < kills and broker is not None:
                time.sleep(rng.uniform(0.0, 1.5))
                broker.kill(0)  # a lost broker, its log dirs as they were
                time.sleep(rng.uniform(0.0, 2.0))
                broker.start_node(0)
            elif part < kills:
                time.sleep(rng.uniform(0.0, 1.5))
                victim = ms.pop(rng.randrange(len(ms)))
                victim.kill()
                ms.append(member())

        repeats = bool(kills) and broker is None and guarantee != "exactly-once"

        def difference() -> str | None:
            return group_difference(case, committed_json(bootstrap, f"out-{tag}"),
                                    committed_json(bootstrap, f"late-{tag}")
                                    if case.end == "window" else [], repeats)
        try:
            wait_for("the model's outputs committed", lambda: difference() is None, wait, ms)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {difference()}\n{exc}\nthe output's log:\n"
                                 f"{log_shape(bootstrap, f'out-{tag}')}"
                                 f"{streams_between(bootstrap, tag)}") from None
        time.sleep(1.0)  # a duplicate would come with a later commit
        assert difference() is None, f"{what}: {difference()}"
        if broker is not None and guarantee != "exactly-once":  # idempotent: a producer id
            assert all(b.producer_id >= 0 for b in run(log_batches(bootstrap, f"out-{tag}", 0))), \
                f"{what}: the output was not written by an idempotent producer"
        stop_all(ms)
    finally:
        kill_left(ms)


def log_shape(bootstrap: str, topic: str, limit: int = 200, partition: int = 0) -> str:
    """A partition of ``topic`` batch by batch, as a read_committed reader pairs them: the
    first offset, the producer id, and the records' values or the transaction marker. For a
    failure's message: which transaction a missing record was in, and how it ended."""
    lines = []
    for b in run(log_batches(bootstrap, topic, partition)):
        what = b.marker or " ".join((r.value or b"").decode(errors="replace")[:60]
                                    for r in b.records)
        first = b.records[0].offset if b.records else b.base_offset
        lines.append(f"  {first}: producer {b.producer_id} epoch {b.producer_epoch}"
                     f"{' (transactional)' if b.transactional else ''}: {what}")
    cut = len(lines) - limit
    return "\n".join(lines[:limit] + ([f"  ... {cut} more"] if cut > 0 else []))


def streams_between(bootstrap: str, tag: str) -> str:
    """For a failure's message: the log of each partition of the job's intermediate and
    broadcast streams, batch by batch (``log_shape``), to tell a record the upstream tasks
    never wrote (or wrote in an aborted transaction) from one the downstream tasks did not
    read."""
    names = sorted(t for t in run(topics(bootstrap))
                   if t.startswith(app_name(tag)) and ("-partition_by-" in t or "-broadcast-" in t))
    counts = run(describe_topics(bootstrap, names)) if names else {}
    parts = [f"\nthe log of {topic} partition {p}:\n"
             f"{log_shape(bootstrap, topic, partition=p, limit=60)}"
             for topic in names for p in range(counts[topic] or 0)]
    return "".join(parts)


def same_generation(ms: list[Member]) -> bool:
    """Every member logged an assignment, all of one generation."""
    seen = [m.assignment() for m in ms]
    return all(s is not None for s in seen) and len({s[0] for s in seen if s}) == 1


@pytest.mark.parametrize("members", [1, 2, 3])
@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_the_group_equals_the_model(kafka_bootstrap: str, tmp_path: Path, guarantee: str,
                                    members: int) -> None:
    n = 0

    @_settings(GROUP_EXAMPLES, shrink=False)
    @given(case=cases())
    def each(case: Case) -> None:
        nonlocal n
        n += 1
        run_kafka_group(kafka_bootstrap, tmp_path / str(n), case, guarantee, members)
    each()


def test_the_group_under_kills_exactly_once_equals_the_model(kafka_bootstrap: str,
                                                              tmp_path: Path) -> None:
    n = 0

    @_settings(GROUP_EXAMPLES, shrink=False)
    @example(case=ETJOIN_LEFT_CASE, seed=1)
    @given(case=cases(), seed=st.integers(0, 2**16))
    def each(case: Case, seed: int) -> None:
        nonlocal n
        n += 1
        run_kafka_group(kafka_bootstrap, tmp_path / str(n), case, "exactly-once", 2,
                        kills=2, seed=seed)
    each()


def test_the_group_under_kills_at_least_once_equals_the_model(kafka_bootstrap: str,
                                                                tmp_path: Path) -> None:
    """At least once, two members, two SIGKILLs while input flows: every store and pane after
    a hop ends as the model's (replays applied once), outputs may repeat with the model's
    values, and no late count comes from a replay (docs/semantics.md, "One answer in every
    combination")."""
    n = 0

    @_settings(GROUP_EXAMPLES, shrink=False)
    @given(case=cases(), seed=st.integers(0, 2**16))
    def each(case: Case, seed: int) -> None:
        nonlocal n
        n += 1
        run_kafka_group(kafka_bootstrap, tmp_path / str(n), case, "at-least-once", 2,
                        kills=2, seed=seed)
    each()


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_the_group_equals_the_model_when_its_broker_restarts(tmp_path: Path,
                                                             guarantee: str) -> None:
    """Apache Kafka only (tansu keeps its topics in memory: a restart empties it): the broker
    is SIGKILLed at a seeded time while input comes, and started again on its log dirs; the
    member rides the outage out and the committed outputs are the model's, each once. At least
    once, its session outlasts the outage (``RESTART_SESSION_MS``) and its producer is
    idempotent: a member the group fenced would replay what it did after its last checkpoint,
    and a send the broker took just before it died would come again, which at least once
    allows. Exactly once, the short session: the member is fenced by the outage, and its tasks
    restore."""
    n = 0
    with ApacheKafkaBroker(root=tmp_path / "broker") as broker:
        @_settings(RESTART_EXAMPLES, shrink=False)
        @given(case=cases(), seed=st.integers(0, 2**16))
        def each(case: Case, seed: int) -> None:
            nonlocal n
            n += 1
            run_kafka_group(broker.bootstrap, tmp_path / str(n), case, guarantee, 1, kills=1,
                            seed=seed, wait=120, broker=broker)
        each()


# -- SIGKILL schedules on static containers ----------------------------------------------------------

def run_static_under_kills(bootstrap: str, tmp: Path, case: Case, system: str, kills: int,
                           seed: int, schedule: list[str] | None = None) -> int:
    """The case exactly once on ``system`` (``local``: the embedded system, two containers;
    ``kafka``: a static container), its input there at once, as bounded runs of a process that
    kills itself with SIGKILL at a seeded fault point (a processed batch, or a step of a
    commit: ``runtime.engine.faults``) ``kills`` times; a last run finishes. The committed outputs
    must be the model's, each once. Returns how many runs were killed (a run may end before
    its fault point)."""
    tag = uuid.uuid4().hex[:8]
    rng = random.Random(seed)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "case.json").write_text(case_to_json(case))
    job_dir = tmp / "job"
    config = {"job.dir": str(job_dir), "task.commit.ms": "25", "task.join.partition.check": "off",
              "job.processing.guarantee": "exactly-once", "job.bounded.stall.ms": str(STALL_MS)}
    if system == "local":
        config["job.container.count"] = "2"
        app = model_local_app(tag, case)
        job = LocalJob(app, config, run=False)
        try:
            job.load_sample(inputs(case))
        finally:
            job.close()
        points = TXN_POINTS
    else:
        config["job.coordinator"] = "static"
        load_case(bootstrap, case, tag)
        points = KAFKA_TXN_POINTS
    env = {**os.environ, "SAMZA_TEST_CASE": str(tmp / "case.json"), "SAMZA_TEST_TAG": tag,
           "SAMZA_TEST_BOOTSTRAP": bootstrap}
    attr = "model_local" if system == "local" else "model"

    def once(crash_at: str | None) -> tuple[int, str]:
        env.pop("SAMZA_DSL_CRASH_AT", None)
        if crash_at:
            env["SAMZA_DSL_CRASH_AT"] = crash_at
        cmd = [sys.executable, "-m", "runtime.ops.cli", "run", f"{APPS}:{attr}", "-q", "--show", "0",
               *(x for k, v in config.items() for x in ("-c", f"{k}={v}"))]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        return finish(proc, None, 120)
    if schedule is None:
        schedule = [f"{rng.choice(points)}:{rng.randint(1, 3)}" for _ in range(kills)]
    what = f"{system}, exactly once, killed at {schedule}: {case}"
    hits = 0
    for point in schedule:
        code, err = once(point)
        # two containers: the one killed is a process of the run, which then stops, exit 2
        killed = code == -signal.SIGKILL or (code == 2 and "(exit code -9)" in err)
        assert code == 0 or killed, f"{what}: a run killed at {point} exited {code}:\n" \
            f"{err[-3000:]}"
        hits += killed
    code, err = once(None)
    assert code == 0, f"{what}: the last run exited {code}:\n{err[-3000:]}"
    if system == "local":
        job = LocalJob(model_local_app(tag, case), config, run=False)
        try:
            out = [m for m in job.messages("out", since_start=False)]
            late = job.messages("late", since_start=False) if case.end == "window" else []
        finally:
            job.close()
    else:
        out = committed_json(bootstrap, f"out-{tag}")
        late = committed_json(bootstrap, f"late-{tag}") if case.end == "window" else []
    wrong = group_difference(case, out, late)
    assert wrong is None, f"{what}: {wrong}"
    return hits


#: on Kafka, a bounded rerun after three kills of IDLE_CASE (schedule commit.sent:3,
#: commit.done:3, batch:2) once waited for the ends of stream of every upstream task in an
#: intermediate partition read to offset 330 of 331: its last record was in a transaction that
#: never ended. The same kind of stall, seen elsewhere with a report of where each task waited,
#: was a task whose EndTxn got no answer, with nothing to bound the wait; a task now settles an
#: unanswered EndTxn itself (``TaskProducer.commit``, ``tests/kafka/test_kafka_unanswered_end.py``).
#: On Apache Kafka the schedules run in CI. On tansu they run in the long mode only: in a run of
#: the full suite, that schedule's rerun on tansu made no progress for 20 s while a task waited
#: in its EndTxn (the report named aiokafka's ``commit_transaction``). It never did alone, nor
#: under a CPU load of its own (6 reruns). It is not the state a broker shared by the session
#: piles up (that slows tansu's EndTxn too, see ``conftest.py``): with a tansu of this module's
#: own it stalled the same way in a full run, so its cause is still to find.
@pytest.mark.parametrize("system", ["local", "kafka"])
def test_static_containers_under_kills_exactly_once_equal_the_model(kafka_bootstrap: str,
                                                                   kafka_broker_kind: str,
                                                                   tmp_path: Path,
                                                                   system: str) -> None:
    if system == "kafka" and kafka_broker_kind == "tansu" and not LONG:
        pytest.skip("tansu may leave an EndTxn unanswered under load (see above): "
                    "SAMZA_DSL_MODEL_EXAMPLES=N runs it")
    n = hits = 0

    @_settings(GROUP_EXAMPLES, shrink=False)
    @given(case=cases(), seed=st.integers(0, 2**16))
    def each(case: Case, seed: int) -> None:
        nonlocal n, hits
        n += 1
        hits += run_static_under_kills(kafka_bootstrap, tmp_path / str(n), case, system, 3, seed)
    each()
    assert hits >= n, f"only {hits} of {3 * n} runs were killed before they ended"


#: found by this matrix: a keyed window after ``partition_by``, exactly once, two local
#: containers, killed at the second commit. A task's first commit takes its hop's outputs with
#: the watermark the hop put before ``("k2", 7500)`` (its one channel is at 9750 there); the
#: kill comes before its second commit covers reading them, so the next run reads them again,
#: and skipped that watermark as an earlier run's: 7500 reached the window before any
#: watermark, opened a pane and was not late. Exactly once, a committed watermark of an
#: earlier run now counts where it stands (``runtime.engine.codec.keep_earlier_watermarks``).
EARLIER_MARK_CASE = Case(
    data={0: [("k0", 1250, 21), ("k0", 9750, 325), ("k2", 7500, 442), ("k1", 15000, 511)]},
    ops=("hop",), end="window", kind="keyed_tumbling", size_ms=2000, early=None, late=None,
    lateness_ms=0, mode=AccumulationMode.ACCUMULATING, declared=False, input_bound_ms=0,
    window_bound_ms=0, elasticity=1, beyond=True)


def test_an_earlier_runs_committed_watermark_counts_after_a_kill(tmp_path: Path) -> None:
    assert run_static_under_kills("", tmp_path, EARLIER_MARK_CASE, "local", 1, 0,
                                  schedule=["commit.start:2"]) == 1


#: found by this matrix: a global tumbling window after ``partition_by`` over a merge of two
#: inputs, one group member, either guarantee. The member reads all of input ``in``, its last
#: message far ahead in event time, while ``in2`` has nothing yet (seed 0 cuts the input there),
#: and is killed; the member in its place never closed a pane, however long it ran and whatever
#: came on ``in2``: a task's event-time progress was not in its checkpoint, so after a restore a
#: partition read to its end before it held every window back until new data came to it. Now
#: the progress as of the checkpoint goes with it (``TaskClock.snapshot``), and a restore
#: starts from it.
STUCK_CASE = Case(
    data={0: [("k1p0", 0, 17), ("k2p0", 2000, 120), ("k0p0", 2750, 203), ("k2p0", 4000, 324),
              ("k1p0", 5500, 415), ("k0p0", 8250, 500), ("k0p0", 8750, 643),
              ("k0p0", 10250, 721), ("k0p0", 10750, 833), ("k2p0", 9500, 947),
              ("k2p0", 11250, 1039)]},
    ops=("hop",), end="window", kind="tumbling", size_ms=2000, early=None, late=None,
    lateness_ms=3000, mode=AccumulationMode.DISCARDING, declared=False, input_bound_ms=0,
    window_bound_ms=2000, elasticity=1, beyond=False,
    merged={0: [("k1q0", 2500, 21), ("k1q0", 2000, 114), ("k0q0", 5750, 238),
                ("k0q0", 7500, 346), ("k1q0", 9750, 440), ("k0q0", 11250, 511),
                ("k0q0", 13000, 621), ("k1q0", 11000, 717), ("k2q0", 14500, 837)]})


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_member_in_place_of_a_killed_one_closes_panes(kafka_bootstrap: str, tmp_path: Path,
                                                         guarantee: str) -> None:
    run_kafka_group(kafka_bootstrap, tmp_path, STUCK_CASE, guarantee, 1, kills=1, seed=0,
                    wait=30)

