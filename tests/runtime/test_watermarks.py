"""Panes never depend on speed (docs/semantics.md rule 8, Event time and watermarks): with every input
partition in event-time order (or within its declared out-of-orderness), an event-time window
gives the same panes whatever the async completion order, the partition count, the elasticity
factor and the number of partition_by hops before it, whether the event time is declared on the
input or only on the window."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

RUN_TIMEOUT = 60.0
WINDOW = timedelta(seconds=10)


def ts(kv: KV[str, dict[str, Any]]) -> float:
    return float(kv.value["ts"])


def user(kv: KV[str, dict[str, Any]]) -> str:
    return str(kv.value["user"])


def value(kv: KV[str, dict[str, Any]]) -> dict[str, Any]:
    return kv.value


def key(kv: KV[str, Any]) -> str:
    return str(kv.key)


def zero() -> int:
    return 0


def count_one(_m: Any, n: int) -> int:
    return n + 1


def pane_record(pane: Any) -> KV[str, int]:
    return KV(f"{pane.key.key}@{pane.key.pane_id}", pane.message)


def build(*, partitions: int = 2, declared: bool = False, hops: int = 1,
          slow_partition: int | None = 1, delay: float = 0.002, jitter: bool = False,
          bound: timedelta | None = None, window_bound: timedelta | None = None,
          config: dict[str, Any] | None = None) -> tuple[Any, Any, Any]:
    """views (``partitions`` partitions) -> async step -> ``hops`` partition_by -> a keyed 10 s
    event-time window counting per user -> counts."""
    mem = MemorySystem()
    app = StreamApplication("wm", config={"task.max.concurrency": 100, **(config or {})})
    serde = KVSerde(StringSerde(), JsonSerde())
    kw: dict[str, Any] = {"event_time": ts} if declared else {}
    if bound is not None:
        kw["max_out_of_orderness"] = bound
    wkw: dict[str, Any] = {} if window_bound is None else {"max_out_of_orderness": window_bound}
    views = app.input(mem.input("views", serde=serde, partitions=partitions, **kw))
    out = app.output(mem.output("counts", serde=KVSerde(StringSerde(), JsonSerde()),
                                partitions=1))

    async def slow(kv: KV[str, dict[str, Any]]) -> list[KV[str, dict[str, Any]]]:
        if jitter:  # completions in a random order
            await asyncio.sleep(random.random() * delay)
        elif kv.value["p"] == slow_partition:
            await asyncio.sleep(delay)
        return [kv]

    stream = views.async_flat_map(slow, name="slow")
    for h in range(hops):
        if h > 0:  # a step the event time is traced through
            stream = stream.map(lambda kv: KV(kv.key, kv.value), name=f"pass{h}")
        stream = stream.partition_by(user, value, serde=serde, name=f"hop{h}")
    if hops == 0:
        stream = stream.map(lambda kv: KV(user(kv), kv.value), name="rekey")
    (stream.window(Windows.keyed_tumbling(key, WINDOW, init=zero, fold=count_one, event_time=ts,
                                          **wkw), name="w")
     .map(pane_record, name="record")
     .send_to(out))
    return app, views, out


def inputs(partitions: int, n: int = 400, users: int = 5, step: float = 0.25
           ) -> dict[int, list[KV[str, dict[str, Any]]]]:
    """``n`` messages per partition, each partition in event-time order; a user's messages are
    keyed by user, so they go to one partition."""
    out: dict[int, list[KV[str, dict[str, Any]]]] = {p: [] for p in range(partitions)}
    for p in range(partitions):
        for i in range(n):
            u = f"u{p}-{i % users}"
            out[p].append(KV(u, {"user": u, "ts": i * step, "p": p}))
    return out


def regroup(messages: dict[int, list[Any]], partitions: int) -> dict[int, list[Any]]:
    """The same messages over ``partitions`` partitions, each still in event-time order."""
    flat = sorted((m for ms in messages.values() for m in ms), key=lambda kv: kv.value["ts"])
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    for m in flat:
        out[int(m.value["user"].split("-")[0][1:]) % partitions].append(m)
    return out


def panes(app: Any, views: Any, out: Any, messages: dict[int, list[Any]],
          config: dict[str, Any] | None = None) -> tuple[Counter[str], int]:
    result = TestRunner(app, config).add_input(views, messages).run(timeout=RUN_TIMEOUT)
    counts = Counter({kv.key: kv.value for kv in result.messages(out)})
    return counts, result.late()


def expected(messages: dict[int, list[Any]]) -> Counter[str]:
    c: Counter[str] = Counter()
    for ms in messages.values():
        for m in ms:
            start = int(m.value["ts"] * 1000) // 10_000 * 10_000
            c[f"{m.value['user']}@{start}"] += 1
    return c


@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_a_slow_partition_loses_nothing(declared: bool) -> None:
    """The issue's case: partition 1 is slowed by an async call; all 800 are kept."""
    app, views, out = build(declared=declared)
    messages = inputs(2)
    counts, late = panes(app, views, out, messages)
    assert late == 0
    assert sum(counts.values()) == 800
    assert counts == expected(messages)


@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_async_completions_in_any_order_at_concurrency_100(declared: bool) -> None:
    random.seed(7)
    app, views, out = build(declared=declared, jitter=True, delay=0.01, slow_partition=None)
    messages = inputs(2, n=600)
    counts, late = panes(app, views, out, messages)
    assert late == 0 and counts == expected(messages)


@pytest.mark.parametrize("hops", [0, 1, 2])
@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_zero_one_or_two_partition_by_hops_give_the_same_panes(hops: int, declared: bool) -> None:
    app, views, out = build(declared=declared, hops=hops)
    messages = inputs(2, n=200)
    counts, late = panes(app, views, out, messages)
    assert late == 0 and counts == expected(messages)


@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_one_or_four_input_partitions_give_the_same_panes(declared: bool) -> None:
    messages = inputs(4, n=150)
    results = []
    for n in (1, 4):
        app, views, out = build(partitions=n, declared=declared, slow_partition=0)
        counts, late = panes(app, views, out, regroup(messages, n))
        assert late == 0
        results.append(counts)
    assert results[0] == results[1] == expected(messages)


@pytest.mark.parametrize("hops", [0, 1])
def test_elasticity_factor_one_or_two_gives_the_same_panes(hops: int) -> None:
    messages = inputs(2, n=200)
    results = []
    for factor in (1, 2):
        app, views, out = build(hops=hops, config={"job.elasticity.factor": factor})
        counts, late = panes(app, views, out, messages)
        assert late == 0
        results.append(counts)
    assert results[0] == results[1] == expected(messages)


def shuffled_within(messages: list[Any], bound_s: float, seed: int) -> list[Any]:
    """``messages`` (in event-time order) with each moved by less than ``bound_s`` seconds."""
    rng = random.Random(seed)
    keyed = [(m.value["ts"] + rng.uniform(0, bound_s * 0.9), m) for m in messages]
    return [m for _, m in sorted(keyed, key=lambda x: x[0])]


@pytest.mark.parametrize("where", ["input", "window"])
def test_out_of_order_within_the_declared_bound_keeps_everything(where: str) -> None:
    bound = timedelta(seconds=3)
    app, views, out = build(declared=where == "input", bound=bound if where == "input" else None,
                            window_bound=bound if where == "window" else None)
    messages = {p: shuffled_within(ms, 3.0, p) for p, ms in inputs(2).items()}
    counts, late = panes(app, views, out, messages)
    assert late == 0 and counts == expected(messages)


def test_without_a_bound_the_same_disorder_is_late() -> None:
    """The control for the test above: the window does drop what comes too late. One message
    in flight at a time: the watermark then moves message by message, so which messages are
    late is fixed by the rules (with 100 in flight it moves between hand-outs, and whether a
    message comes too late depends on where the task's batches end)."""
    app, views, out = build(declared=True, hops=0, slow_partition=None,
                            config={"task.max.concurrency": 1})
    messages = {p: shuffled_within(ms, 3.0, p) for p, ms in inputs(2).items()}
    _, late = panes(app, views, out, messages)
    assert late > 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partitions=st.integers(1, 3), hops=st.integers(0, 2), declared=st.booleans(),
       concurrency=st.sampled_from([1, 7, 100]), factor=st.integers(1, 2),
       steps=st.lists(st.lists(st.floats(0, 4), min_size=1, max_size=40), min_size=3,
                      max_size=3), seed=st.integers(0, 1000),
       disorder=st.sampled_from([None, "input", "window"]))
def test_panes_do_not_depend_on_speed(partitions: int, hops: int, declared: bool,
                                      concurrency: int, factor: int,
                                      steps: list[list[float]], seed: int,
                                      disorder: str | None) -> None:
    """Any input in event-time order, or out of order within a declared bound (on the input or
    on the window), any shape: the panes are those of the input, none is late."""
    random.seed(seed)
    messages: dict[int, list[Any]] = {}
    for p in range(partitions):
        t = 0.0
        messages[p] = []
        for i, dt in enumerate(steps[p]):
            t += dt
            u = f"u{p}-{i % 3}"
            messages[p].append(KV(u, {"user": u, "ts": t, "p": p}))
        if disorder is not None:
            messages[p] = shuffled_within(messages[p], 5.0, seed + p)
    if disorder == "input":
        declared = True
    bound = timedelta(seconds=5) if disorder else None
    app, views, out = build(partitions=partitions, declared=declared, hops=hops, jitter=True,
                            delay=0.003, slow_partition=None,
                            bound=bound if disorder == "input" else None,
                            window_bound=bound if disorder == "window" else None,
                            config={"task.max.concurrency": concurrency,
                                    "job.elasticity.factor": factor})
    counts, late = panes(app, views, out, messages)
    assert late == 0 and counts == expected(messages)


def test_a_window_behind_an_async_step_after_a_hop_cannot_be_traced_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    mem = MemorySystem()
    app = StreamApplication("untraced")
    serde = KVSerde(StringSerde(), JsonSerde())
    views = app.input(mem.input("views", serde=serde, partitions=2))
    out = mem.output("counts", serde=KVSerde(StringSerde(), JsonSerde()), partitions=1)

    async def same(kv: Any) -> list[Any]:
        return [kv]

    (views.partition_by(user, value, serde=serde, name="by-user")
     .async_flat_map(same, name="after")
     .window(Windows.keyed_tumbling(key, WINDOW, init=zero, fold=count_one, event_time=ts),
             name="w")
     .map(pane_record, name="record")
     .send_to(app.output(out)))
    messages = inputs(2, n=100)
    with caplog.at_level(logging.WARNING, logger="samza_dsl.watermarks"):
        result = TestRunner(app).add_input(views, messages).run(timeout=RUN_TIMEOUT)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.watermarks"]
    assert "'untraced-1-partition_by-by-user' cannot be traced" in warning
    assert "'untraced-1-window-w'" in warning and "Declare event_time" in warning
    # the producers measure the stream through the async step: none is late
    assert result.late() == 0
    assert Counter({kv.key: kv.value for kv in result.messages(out)}) == expected(messages)


def test_a_word_count_behind_an_async_step_loses_no_word() -> None:
    """The issue's word count: 9,127 words, an async step at task.max.concurrency 100."""
    mem = MemorySystem()
    app = StreamApplication("wc", config={"task.max.concurrency": 100})
    lines = app.input(mem.input("lines", partitions=2))
    out = app.output(mem.output("counts", partitions=1))
    rng = random.Random(13)

    async def lookup(word: dict[str, Any]) -> list[dict[str, Any]]:
        await asyncio.sleep(rng.random() * 0.002)
        return [word]

    (lines.flat_map(lambda line: [{"w": w, "ts": line["ts"]} for w in line["text"].split()],
                    name="words")
     .async_flat_map(lookup, name="lookup")
     .partition_by(lambda w: w["w"], name="by-word")
     .window(Windows.keyed_tumbling(lambda kv: kv.key, WINDOW, init=zero, fold=count_one,
                                    event_time=lambda kv: kv.value["ts"]), name="count")
     .map(lambda p: KV(p.key.key, p.message), name="record")
     .send_to(out))
    vocab = [f"w{i}" for i in range(40)]
    messages: dict[int, list[Any]] = {0: [], 1: []}
    total = 0
    for i in range(1200):
        n = 1 + rng.randrange(14)
        total += n
        messages[i % 2].append({"ts": i * 0.05, "text": " ".join(rng.choice(vocab)
                                                                for _ in range(n))})
    result = TestRunner(app).add_input(lines, messages).run(timeout=RUN_TIMEOUT)
    assert result.late() == 0
    assert sum(kv.value for kv in result.messages(out)) == total


@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_sessions_of_a_key_fed_by_two_producers_do_not_depend_on_their_speed(
        declared: bool) -> None:
    """One key's messages come from both input partitions, partition 1 slowed: its sessions
    are those of the key's messages in event-time order, whatever arrives first."""
    mem = MemorySystem()
    app = StreamApplication("sess", config={"task.max.concurrency": 20})
    views = app.input(mem.input("views", partitions=2,
                                **({"event_time": lambda m: m["ts"]} if declared else {})))
    out = app.output(mem.output("sessions", partitions=1))

    async def slow(m: dict[str, Any]) -> list[dict[str, Any]]:
        await asyncio.sleep(0.01 if m["p"] == 1 else 0)
        return [m]

    (views.async_flat_map(slow, name="slow")
     .partition_by(lambda m: m["user"], name="by-user")
     .window(Windows.keyed_session(lambda kv: kv.key, timedelta(seconds=5),
                                   event_time=lambda kv: kv.value["ts"]), name="s")
     .map(lambda p: KV(p.key.pane_id, sorted(kv.value["ts"] for kv in p.message)),
          name="record")
     .send_to(out))
    times = {0: [0.0, 2.0, 4.0, 20.0, 22.0, 40.0], 1: [1.0, 3.0, 5.0, 21.0, 41.0]}
    messages = {p: [{"user": "k", "ts": t, "p": p} for t in ts_] for p, ts_ in times.items()}
    result = TestRunner(app).add_input(views, messages).run(timeout=RUN_TIMEOUT)
    assert result.late() == 0
    assert sorted((kv.key, kv.value) for kv in result.messages(out)) == [
        ("0", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]), ("20000", [20.0, 21.0, 22.0]),
        ("40000", [40.0, 41.0])]
