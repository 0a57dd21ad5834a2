"""Messages handed out a batch at a time give what the hand-out one message at a time gives.

A task takes a run of messages in one call where the shape allows it: an input with a declared
event time going through a ``partition_by`` (or a one-to-one function and a ``send_to``), and an
intermediate stream feeding a keyed fold window (``Operator.process_run``). A thread pool for
user code (``job.container.thread.pool.size``) turns both off, so the same job run with one is
the one-message-at-a-time reference: the outputs, the late messages, the metrics and a failure's
offset must agree."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import LocalRunner, TestRunner
from samza_dsl import KV, StreamApplication, Triggers, Windows
from samza_dsl.errors import TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem

SERDE = KVSerde(StringSerde(), JsonSerde())
PER_MESSAGE = {"task.batch.handout": False}


def app_of(system: Any, *, fail_on: int | None = None, bound_s: float = 0.0,
           slow_below: int = 0, partitions: int = 2) -> StreamApplication:
    """Views partitioned by country, counted per country in 10 s panes; late views are kept
    for 5 s. ``fail_on``: the window's fold raises on the view of that id. ``slow_below``: the
    partition key takes 1 ms for views of a lower id."""
    app = StreamApplication("batched", config={"task.commit.ms": 50})

    def country(kv: KV[str, Any]) -> str:
        if kv.value["id"] < slow_below:
            time.sleep(0.001)
        return str(kv.value["country"])

    def fold(kv: KV[str, Any], n: int) -> int:
        if kv.value["id"] == fail_on:
            raise ValueError(f"view {fail_on} is bad")
        return n + 1

    views = app.input(system.input("views", serde=SERDE, partitions=partitions,
                                   event_time=lambda kv: kv.value["ts"],
                                   max_out_of_orderness=timedelta(seconds=bound_s)))
    (views.partition_by(country, lambda kv: kv.value, serde=SERDE,
                        name="by-country")
     .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                    fold=fold, event_time=lambda kv: kv.value["ts"])
             .allowed_lateness(timedelta(seconds=5)).late_trigger(Triggers.count(1)), name="w")
     .map(lambda p: KV(p.key.key, [p.key.pane_id, p.message, str(p.firing)]), name="fmt")
     .send_to(app.output(system.output("counts", serde=SERDE, partitions=1))))
    return app


def views(n: int, seed: int) -> dict[int, list[KV[str, Any]]]:
    """Views mostly in time order, with some behind their partition's progress (late for the
    window, or only behind the channel)."""
    rnd = random.Random(seed)
    parts: dict[int, list[KV[str, Any]]] = {0: [], 1: []}
    t = 1_000.0
    for i in range(n):
        t += rnd.random() * 0.5
        ts = t - rnd.choice([0.0] * 8 + [3.0, 14.0])
        parts[i % 2].append(KV(f"v{i}", {"id": i, "country": f"c{rnd.randrange(5)}",
                                         "ts": round(ts, 3)}))
    return parts


def failures(make: Callable[[Any], StreamApplication], data: dict[int, list[Any]],
             runner_kind: str, tmp_path: Path) -> list[TaskError]:
    """The TaskErrors the batched run and the one-message-at-a-time run stop with."""
    errors = []
    for name, config in (("batched", {}), ("per-message", PER_MESSAGE)):
        with pytest.raises(TaskError) as info:
            if runner_kind == "test":
                TestRunner(make(MemorySystem()), config).add_input("views", data).run(timeout=60)
            else:
                LocalRunner(make(LocalSystem("local")), {"job.dir": str(tmp_path / name),
                                                         **config},
                            inputs={"views": data}).run()
        errors.append(info.value)
    return errors


def outcome(runner: Any, late_op: str) -> tuple[list[Any], int]:
    return sorted(map(repr, runner.messages("counts"))), runner.late(late_op)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_local_runner_batched_equals_one_message_at_a_time(seed: int, tmp_path: Path) -> None:
    # one input partition: with two, which upstream task's records reach the intermediate
    # partition first varies with the machine's load, and with it which views are late
    parts = views(3000, seed)
    data = {0: sorted(parts[0] + parts[1], key=lambda kv: kv.value["id"])}
    got = {}
    for name, config in (("batched", {}), ("per-message", PER_MESSAGE)):
        runner = LocalRunner(app_of(LocalSystem("local"), bound_s=1.0, partitions=1),
                             {"job.dir": str(tmp_path / name), **config},
                             inputs={"views": data}).run()
        samples = runner.metrics.samples()
        ins: dict[str, int] = {}
        handle: dict[str, int] = {}
        for g, n, labels, v in samples:
            if (g, n) == ("operator", "messages-in"):
                ins[labels["operator"]] = ins.get(labels["operator"], 0) + v
            elif (g, n) == ("operator", "handle-ns"):
                handle[labels["operator"]] = handle.get(labels["operator"], 0) + v
        got[name] = (outcome(runner, "batched-1-window-w"), ins)
        assert ins["batched-1-partition_by-by-country"] == 3000
        assert ins["batched-1-window-w"] == 3000
        assert handle["batched-1-partition_by-by-country"] > 0
        assert handle["batched-1-window-w"] > 0
    assert got["batched"] == got["per-message"]
    (_, late), _ = got["batched"]
    assert late > 0  # some views came after their pane and its lateness


def test_test_runner_batched_equals_one_message_at_a_time() -> None:
    data = views(3000, 7)
    a = TestRunner(app_of(MemorySystem())).add_input("views", data).run(timeout=60)
    b = TestRunner(app_of(MemorySystem()), PER_MESSAGE).add_input("views", data).run(timeout=60)
    assert sorted(map(repr, a.messages("counts"))) == sorted(map(repr, b.messages("counts")))
    assert a.late("batched-1-window-w") == b.late("batched-1-window-w") > 0


@pytest.mark.parametrize("runner_kind", ["local", "test"])
def test_a_failing_fold_names_the_window_stream_and_offset(runner_kind: str,
                                                           tmp_path: Path) -> None:
    """The batched run stops at the view the per-message run stops at."""
    data = {0: [KV(f"v{i}", {"id": i, "country": f"c{i % 3}", "ts": 1_000.0 + i})
                for i in range(0, 80, 2)],
            1: [KV(f"v{i}", {"id": i, "country": f"c{i % 3}", "ts": 1_000.0 + i})
                for i in range(1, 80, 2)]}
    where = []
    for err in failures(lambda system: app_of(system, fail_on=23), data, runner_kind, tmp_path):
        assert err.op_id == "batched-1-window-w"
        assert err.stream == "batched-1-partition_by-by-country"
        assert "ValueError: view 23 is bad" in str(err)
        where.append((err.partition, err.offset))
    assert where[0] == where[1]


EDGE_MS = st.sampled_from([0.0, 0.4999, 0.5, 0.5001, 1.5, 2.5, -0.5, -1.0, -1.5, 9_999.5,
                           9_998.5, 9_999.4999])


@settings(max_examples=int(os.environ.get("SAMZA_DSL_MODEL_EXAMPLES", "60")), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), EDGE_MS, st.integers(0, 2)), min_size=1,
                max_size=60),
       st.sampled_from([0.0, 1.0]))
def test_pane_edges_batched_equal_one_message_at_a_time(
        events: list[tuple[int, float, int]], bound_s: float) -> None:
    """Times at and around pane edges and rounding ties (in ms): each message takes the pane
    the one-message-at-a-time path gives it, and the same are late."""
    data: dict[int, list[KV[str, Any]]] = {0: [], 1: []}
    for i, (pane, ms, country) in enumerate(events):
        ts = 1_000.0 + pane * 10.0 + ms / 1000.0
        data[i % 2].append(KV(f"v{i}", {"id": i, "country": f"c{country}", "ts": ts}))
    a = TestRunner(app_of(MemorySystem(), bound_s=bound_s)).add_input("views", data).run(
        timeout=60)
    b = TestRunner(app_of(MemorySystem(), bound_s=bound_s), PER_MESSAGE).add_input(
        "views", data).run(timeout=60)
    assert sorted(map(repr, a.messages("counts"))) == sorted(map(repr, b.messages("counts")))
    assert a.late("batched-1-window-w") == b.late("batched-1-window-w")


def chain_app(system: Any, fail_on: int | None = None) -> StreamApplication:
    """filter, map, map, then send_to: one-to-one functions in a row."""
    app = StreamApplication("chained", config={"task.commit.ms": 50})

    def shout(kv: KV[str, Any]) -> KV[str, Any]:
        if kv.value["id"] == fail_on:
            raise ValueError(f"view {fail_on} is bad")
        return KV(kv.key.upper(), kv.value)

    (app.input(system.input("views", serde=SERDE, partitions=2))
     .filter(lambda kv: kv.value["id"] % 3 != 0, name="two-thirds")
     .map(shout, name="shout")
     .map(lambda kv: KV(kv.key, {"id": kv.value["id"], "c": kv.value["country"]}), name="slim")
     .send_to(app.output(system.output("counts", serde=SERDE, partitions=2))))
    return app


def test_a_chain_of_one_to_one_functions_is_counted_per_operator(tmp_path: Path) -> None:
    data = views(3000, 5)
    got = {}
    for name, config in (("batched", {}), ("per-message", PER_MESSAGE)):
        runner = LocalRunner(chain_app(LocalSystem("local")),
                             {"job.dir": str(tmp_path / name), **config},
                             inputs={"views": data}).run()
        counts: dict[tuple[str, str], int] = {}
        handle: dict[str, int] = {}
        for g, n, labels, v in runner.metrics.samples():
            if g == "operator" and n in ("messages-in", "messages-out"):
                key = (labels["operator"], n)
                counts[key] = counts.get(key, 0) + v
            elif (g, n) == ("operator", "handle-ns"):
                handle[labels["operator"]] = handle.get(labels["operator"], 0) + v
        out = runner.messages("counts")
        got[name] = (sorted(map(repr, out)), counts)
        kept = sum(1 for i in range(3000) if i % 3)
        assert len(out) == kept
        assert counts[("chained-1-filter-two-thirds", "messages-in")] == 3000
        assert counts[("chained-1-filter-two-thirds", "messages-out")] == kept
        for op in ("chained-1-map-shout", "chained-1-map-slim"):
            assert counts[(op, "messages-in")] == counts[(op, "messages-out")] == kept
            assert handle[op] > 0
    assert got["batched"] == got["per-message"]


@pytest.mark.parametrize("runner_kind", ["local", "test"])
def test_a_failing_function_in_a_chain_names_its_operator_and_offset(runner_kind: str,
                                                                      tmp_path: Path) -> None:
    data = views(200, 9)
    where = []
    for err in failures(lambda system: chain_app(system, fail_on=77), data, runner_kind,
                        tmp_path):
        assert err.op_id == "chained-1-map-shout"
        assert "ValueError: view 77 is bad" in str(err)
        where.append((err.stream, err.partition, err.offset))
    assert where[0] == where[1] == ("views", 1, 38)


# what the map below returns for a view, by kind; the failing ones come at most once a run
SHAPES = ["kv", "kv", "kv", "kv", "none-key", "none-value", "dropped"]
FAILING = ["plain", "bad-value", "raise"]


def shapes_app(system: Any, kinds: list[str], hop: bool = False) -> StreamApplication:
    """A map whose output for the view of id i is of kind ``kinds[i]``, sent to three
    partitions: every case of the batch's loop from a map to records. ``hop``: the views come
    from two partitions with event times through a ``partition_by``, so the map's batches hold
    the upstream tasks' watermarks between their messages (control records mid-batch)."""
    app = StreamApplication("shapes", config={"task.commit.ms": 50})

    def shape(kv: KV[str, Any]) -> Any:
        i = kv.value["id"]
        kind = kinds[i]
        if kind == "raise":
            raise ValueError(f"view {i} is bad")
        if kind == "none-key":
            return KV(None, kv.value)
        if kind == "none-value":
            return KV(kv.key, None)
        if kind == "dropped":
            return None
        if kind == "plain":
            return kv.value
        if kind == "bad-value":
            return KV(kv.key, {i})  # a set: JSON cannot encode it
        return KV(kv.key.upper(), kv.value)

    if hop:
        views = app.input(system.input("views", serde=SERDE, partitions=2,
                                       event_time=lambda kv: kv.value["id"] / 1000.0))
        stream = views.partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=SERDE,
                                    name="hop")
    else:
        stream = app.input(system.input("views", serde=SERDE, partitions=1))
    (stream.map(shape, name="shape")
     .send_to(app.output(system.output("counts", serde=SERDE, partitions=3))))
    return app


def _run_shapes(kinds: list[str], data: dict[int, list[Any]], job_dir: Path,
                config: dict[str, Any], hop: bool = False) -> Any:
    """What a LocalRunner gives: the output's records and the map's counts, or its error."""
    try:
        runner = LocalRunner(shapes_app(LocalSystem("local"), kinds, hop),
                             {"job.dir": str(job_dir), **config}, inputs={"views": data}).run()
    except TaskError as e:
        return ("failed", e.op_id, e.stream, e.partition, e.offset,
                str(e).replace(str(job_dir), "JOB"))
    counts: dict[str, int] = {}
    for g, n, labels, v in runner.metrics.samples():  # one sample per task
        if (g == "operator" and n in ("messages-in", "messages-out")
                and labels["operator"].endswith("-map-shape")):
            counts[n] = counts.get(n, 0) + v
    job = runner.job
    log = job.log_of(job.stream_system["counts"])
    try:  # the records as written, by partition: a tombstone is not the value null
        records = [log.read(job.physical["counts"], p, 0, 10_000)[1] for p in range(3)]
    finally:
        runner.close()
    return "ran", records, counts


def _assert_shapes_batched_as_one_at_a_time(kinds: list[str], data: dict[int, list[Any]],
                                            hop: bool = False) -> None:
    """The shapes job batched and one message at a time: the same records, counts and failure;
    every message counted in, and out but the dropped ones."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        got = [_run_shapes(kinds, data, Path(d) / name, config, hop)
               for name, config in (("batched", {}), ("per-message", PER_MESSAGE))]
    assert got[0] == got[1]
    if got[0][0] == "ran":
        _, out, counts = got[0]
        assert counts["messages-in"] == len(kinds)
        assert counts["messages-out"] == len(kinds) - kinds.count("dropped")


@settings(max_examples=int(os.environ.get("SAMZA_DSL_MODEL_EXAMPLES", "60")) // 2,
          deadline=None)
@given(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=150),
       st.none() | st.tuples(st.integers(0, 150), st.sampled_from(FAILING)))
def test_a_map_to_records_batched_equals_one_message_at_a_time(
        kinds: list[str], failing: tuple[int, str] | None) -> None:
    """Whatever a map returns (a KV, a KV with no key or no value, None, a plain value, a value
    its serde cannot encode) or raises, the batch's loop gives the outputs, counts and failure
    the one-message-at-a-time path gives."""
    if failing is not None:
        at, kind = failing
        kinds = kinds[:at] + [kind] + kinds[at:]

    data = {0: [KV(f"v{i}", {"id": i}) for i in range(len(kinds))]}  # one task: one failure
    _assert_shapes_batched_as_one_at_a_time(kinds, data)


@settings(max_examples=int(os.environ.get("SAMZA_DSL_MODEL_EXAMPLES", "60")) // 4,
          deadline=None)
@given(st.lists(st.sampled_from(SHAPES), min_size=2, max_size=120),
       st.none() | st.tuples(st.integers(0, 120), st.sampled_from(FAILING)),
       st.randoms(use_true_random=False))
def test_a_map_after_a_hop_batched_equals_one_message_at_a_time(
        kinds: list[str], failing: tuple[int, str] | None, rnd: random.Random) -> None:
    """The same map after a ``partition_by`` of two partitions with event times: its batches
    hold the two upstream tasks' watermarks between their messages, where the batch's loop
    stops and goes on; outputs, counts and a failure are those of the one-at-a-time path."""
    if failing is not None:
        at, kind = failing
        kinds = kinds[:at] + [kind] + kinds[at:]
    views = [KV(f"k{rnd.randrange(5)}", {"id": i}) for i in range(len(kinds))]
    data: dict[int, list[Any]] = {0: [], 1: []}
    for v in views:
        data[rnd.randrange(2)].append(v)
    _assert_shapes_batched_as_one_at_a_time(kinds, data, hop=True)


def test_test_runner_outputs_do_not_follow_how_long_messages_take() -> None:
    """A task sizes its batches by how long its messages take, and a stage's watermark goes
    downstream after each batch: with the sizes following the pace, a view behind its input's
    declared out-of-orderness was late in one run and not in another of the same input (under a
    loaded machine). TestRunner's batches are of one size: a key function slow on the first views
    gives what a quick one gives."""
    data = views(3000, 7)

    def run(slow_below: int) -> tuple[list[str], int]:
        result = TestRunner(app_of(MemorySystem(), slow_below=slow_below)).add_input(
            "views", data).run(timeout=60)
        return sorted(map(repr, result.messages("counts"))), result.late("batched-1-window-w")

    quick = run(0)
    assert run(800) == quick
    assert quick[1] > 0
