"""Property tests of the runtime against plain-Python reference models (docs/semantics.md rules 5-15).

- Random chains of map/filter/flat_map/async_flat_map/partition_by give the same outputs, partition
  by partition, at any ``task.max.concurrency`` as at 1, and as the reference model.
- Event-time window panes do not depend on arrival order within the allowed lateness.
- Keyed tumbling folds (event time, local watermark) and partition_by + keyed window equal a
  reference group-by.
- A stream-stream join equals a reference model of "latest message per key per side, younger than
  the TTL", on a controllable clock.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runtime.memory import MemoryBroker, memory_job
from runtime.testing import run_container as run_memory_container
from samza_dsl import KV, FiringType, StreamApplication, Triggers, Windows
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner, strategies

PROPS = settings(max_examples=50, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
RUN_TIMEOUT = 5.0
SIZE_S = 10.0  # window size in seconds
SIZE = timedelta(seconds=SIZE_S)

# --- (a) random pipelines: any concurrency gives the concurrency-1 outputs ------------------------

OPS = ("map", "filter", "flat_map", "async", "async_key", "partition_by")


@st.composite
def pipelines(draw: st.DrawFn) -> list[tuple[str, int]]:
    n = draw(st.integers(1, 5))
    return [(draw(st.sampled_from(OPS)), draw(st.integers(1, 7))) for _ in range(n)]


def reference_chain(ops: list[tuple[str, int]], xs: list[int]) -> list[int]:
    """The chain's outputs for ``xs`` as plain Python (a multiset; order is not modelled)."""
    for op, k in ops:
        out: list[int] = []
        for x in xs:
            if op == "map":
                if x % (k + 4) != 0:  # a None result is dropped
                    out.append(x * 2 + k)
            elif op == "filter":
                if x % (k + 1) != 0:
                    out.append(x)
            elif op == "flat_map":
                out.extend([x] * (x % 3))
            elif op in ("async", "async_key"):
                if x % (k + 5) != 0:
                    out.extend([x + k, -x])
            else:  # partition_by, mapped back to the value
                out.append(x)
        xs = out
    return xs


def build_chain(ops: list[tuple[str, int]], delays: list[float],
                sched: strategies.DelayScheduler, concurrency: int, inter_partitions: int,
                partitions: int, active: list[int]) -> tuple[StreamApplication, Any, Any]:
    """``active`` is [calls in flight now, most calls in flight at once]."""
    mem = MemorySystem()
    app = StreamApplication("props", config={"task.max.concurrency": concurrency,
                                             "job.intermediate.stream.partitions": inter_partitions})
    inp = mem.input("in", partitions=partitions)
    out = mem.output("out")
    s = app.input(inp)
    for i, (op, k) in enumerate(ops):
        if op == "map":
            s = s.map(lambda x, k=k: None if x % (k + 4) == 0 else x * 2 + k, name=f"m{i}")
        elif op == "filter":
            s = s.filter(lambda x, k=k: x % (k + 1) != 0, name=f"f{i}")
        elif op == "flat_map":
            s = s.flat_map(lambda x: [x] * (x % 3), name=f"fm{i}")
        elif op in ("async", "async_key"):
            async def fn(x: int, k: int = k, i: int = i) -> list[int]:
                active[0] += 1
                active[1] = max(active)
                await sched.sleep(delays[(x * 31 + i) % len(delays)], tag=(i, x))
                active[0] -= 1
                return [] if x % (k + 5) == 0 else [x + k, -x]
            if op == "async":
                s = s.async_flat_map(fn, name=f"a{i}")
            else:
                s = s.async_flat_map(fn, name=f"a{i}", ordering="key", key=lambda x, k=k: x % k)
        else:
            s = s.partition_by(lambda x, k=k: x % (k + 2), name=f"pb{i}").map(
                lambda kv: kv.value, name=f"v{i}")
    s.send_to(app.output(out))
    return app, inp, out


def run_chain(ops: list[tuple[str, int]], delays: list[float], parts: dict[int, list[int]],
              concurrency: int, inter_partitions: int) -> dict[int, Counter[int]]:
    sched = strategies.DelayScheduler()
    active = [0, 0]
    app, inp, out = build_chain(ops, delays, sched, concurrency, inter_partitions, len(parts),
                                active)
    result = TestRunner(app).add_input(inp, parts).run(timeout=RUN_TIMEOUT)
    if concurrency > 1:
        event(f"async calls in flight at once > 1: {active[1] > 1}")
    return {p: Counter(msgs) for p, msgs in result.partitions(out).items()}


@PROPS
@given(ops=pipelines(),
       parts=strategies.partitioned_messages(st.integers(-50, 50), partitions=st.integers(1, 3),
                                             max_size=25),
       concurrency=st.integers(1, 64),
       delays=st.lists(strategies.async_delays(0.01), min_size=1, max_size=8),
       inter_partitions=st.integers(1, 3))
def test_any_concurrency_gives_the_concurrency_1_outputs(
        ops: list[tuple[str, int]], parts: dict[int, list[int]], concurrency: int,
        delays: list[float], inter_partitions: int) -> None:
    got = run_chain(ops, delays, parts, concurrency, inter_partitions)
    base = run_chain(ops, delays, parts, 1, inter_partitions)
    assert got == base
    everything = [x for p in sorted(parts) for x in parts[p]]
    assert sum(got.values(), Counter()) == Counter(reference_chain(ops, everything))


# --- (d) event-time panes do not depend on arrival order within the allowed lateness --------------

def final_panes(panes: list[Any]) -> dict[tuple[Any, str], Any]:
    """The last firing per (key, pane id): with ACCUMULATING, the pane's final value."""
    last: dict[tuple[Any, str], Any] = {}
    for p in panes:
        last[(p.key.key, p.key.pane_id)] = p.message
    return last


def window_panes(messages: list[KV[str, float]], lateness: timedelta) -> list[Any]:
    """Keyed event-time window, allowed lateness and a late trigger firing on every late
    message (ACCUMULATING), over one partition in the given arrival order."""
    mem = MemorySystem()
    app = StreamApplication("late")
    inp = mem.input("in", partitions=1)
    out = mem.output("panes")
    w = (Windows.keyed_tumbling(lambda m: m.key, SIZE, init=tuple,
                                fold=lambda m, acc: acc + (m.value,),
                                event_time=lambda m: m.value)
         .allowed_lateness(lateness)
         .late_trigger(Triggers.repeat(Triggers.count(1))))
    app.input(inp).window(w, name="w").send_to(app.output(out))
    return TestRunner(app).add_input(inp, messages).run(timeout=RUN_TIMEOUT).messages(out)


def reference_panes(messages: list[KV[str, float]]) -> dict[tuple[Any, str], list[float]]:
    size_ms = int(SIZE_S * 1000)
    out: dict[tuple[Any, str], list[float]] = defaultdict(list)
    for m in messages:
        ms = round(m.value * 1000)
        out[(m.key, str(ms - ms % size_ms))].append(m.value)
    return {k: sorted(v) for k, v in out.items()}


def normalise(panes: dict[tuple[Any, str], Any]) -> dict[tuple[Any, str], list[float]]:
    return {k: sorted(v) for k, v in panes.items()}


@st.composite
def disordered_inputs(draw: st.DrawFn, max_disorder: float) -> list[KV[str, float]]:
    n = draw(st.integers(1, 40))
    times = draw(strategies.event_times(n, max_step=4.0, max_disorder=max_disorder))
    keys = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    return [KV(k, t) for k, t in zip(keys, times, strict=True)]


@PROPS
@given(data=st.data(), messages=disordered_inputs(max_disorder=3.0))
def test_bounded_disorder_within_lateness_gives_the_in_order_panes(
        data: st.DataObject, messages: list[KV[str, float]]) -> None:
    # a second arrival order, also with disorder <= 3 s: sort by event time + a jitter in [0, 3]
    jitter = data.draw(st.lists(st.integers(0, 3000), min_size=len(messages),
                                max_size=len(messages)))
    shuffled = [m for _, _, m in sorted((round(m.value * 1000) + j, i, m)
                                        for i, (m, j) in enumerate(zip(messages, jitter,
                                                                       strict=True)))]
    in_order = sorted(messages, key=lambda m: m.value)
    lateness = timedelta(seconds=3)
    panes = window_panes(messages, lateness)
    event(f"late firings: {any(p.firing is FiringType.LATE for p in panes)}")
    a = normalise(final_panes(panes))
    b = normalise(final_panes(window_panes(shuffled, lateness)))
    c = normalise(final_panes(window_panes(in_order, lateness)))
    assert a == b == c == reference_panes(messages)


@PROPS
@given(data=st.data(),
       per_key=st.dictionaries(st.sampled_from("abcd"),
                               st.lists(st.integers(0, 60_000), min_size=1, max_size=10),
                               min_size=1, max_size=4))
def test_any_interleaving_within_lateness_gives_the_same_panes(
        data: st.DataObject, per_key: dict[str, list[int]]) -> None:
    # each key's messages in event-time order, keys interleaved in two arbitrary ways; the
    # lateness covers the whole span, so every interleaving is "within the allowed lateness"
    streams = {k: [KV(k, ms / 1000.0) for ms in sorted(v)] for k, v in per_key.items()}
    first = [m for _, m in data.draw(strategies.arrival_orders(streams))]
    second = [m for _, m in data.draw(strategies.arrival_orders(streams))]
    lateness = timedelta(seconds=61)
    panes = window_panes(first, lateness)
    event(f"late firings: {any(p.firing is FiringType.LATE for p in panes)}")
    a = normalise(final_panes(panes))
    b = normalise(final_panes(window_panes(second, lateness)))
    assert a == b == reference_panes(first)


# --- (e) keyed tumbling fold with event time = reference model -----------------------------------

def reference_fold(messages: list[KV[str, float]]) -> Counter[tuple[str, str, int, float]]:
    """Per partition: the window's watermark is the latest event time seen; a message whose pane
    ended at or before it is late and dropped; every pane with data fires once as DEFAULT."""
    size_ms = int(SIZE_S * 1000)
    watermark = None
    panes: dict[tuple[str, int], tuple[int, float]] = {}
    for m in messages:
        ms = round(m.value * 1000)
        start = ms - ms % size_ms
        if watermark is not None and ms <= watermark and start + size_ms <= watermark:
            continue  # late
        watermark = ms if watermark is None else max(watermark, ms)
        n, total = panes.get((m.key, start), (0, 0.0))
        panes[(m.key, start)] = (n + 1, round(total + m.value, 3))
    return Counter((k, str(start), n, total) for (k, start), (n, total) in panes.items())


@PROPS
@given(parts=st.dictionaries(st.integers(0, 2), disordered_inputs(max_disorder=12.0),
                             min_size=1, max_size=3))
def test_keyed_event_time_fold_equals_the_reference(
        parts: dict[int, list[KV[str, float]]]) -> None:
    parts = {p: parts.get(p, []) for p in range(max(parts) + 1)}
    mem = MemorySystem()
    app = StreamApplication("fold")
    inp = mem.input("in", partitions=len(parts))
    out = mem.output("panes")
    w = Windows.keyed_tumbling(lambda m: m.key, SIZE, init=lambda: (0, 0.0),
                               fold=lambda m, acc: (acc[0] + 1, round(acc[1] + m.value, 3)),
                               event_time=lambda m: m.value)
    app.input(inp).window(w, name="w").send_to(app.output(out))
    panes = TestRunner(app).add_input(inp, parts).run(timeout=RUN_TIMEOUT).messages(out)
    assert all(p.firing is FiringType.DEFAULT for p in panes)
    got = Counter((p.key.key, p.key.pane_id, *p.message) for p in panes)
    expected = sum((reference_fold(msgs) for msgs in parts.values()), Counter())
    event(f"late messages dropped: {sum(n for *_, n, _ in expected) < sum(map(len, parts.values()))}")
    assert got == expected


# --- (f) partition_by then a keyed window = a reference group-by ---------------------------------

@st.composite
def in_order_partitions(draw: st.DrawFn) -> dict[int, list[tuple[str, float, int]]]:
    n = draw(st.integers(1, 3))
    out = {}
    for p in range(n):
        size = draw(st.integers(0, 25))
        times = draw(strategies.event_times(size, max_step=6.0))
        out[p] = [(draw(st.sampled_from(["u1", "u2", "u3", "u4", "u5"])), t,
                   draw(st.integers(0, 9))) for t in times]
    return out


@PROPS
@given(parts=in_order_partitions(), inter_partitions=st.integers(1, 4))
def test_partition_by_then_keyed_window_equals_a_group_by(
        parts: dict[int, list[tuple[str, float, int]]], inter_partitions: int) -> None:
    mem = MemorySystem()
    app = StreamApplication("grouped", config={
        "job.intermediate.stream.partitions": inter_partitions})
    # the input declares event time: watermarks flow through the intermediate stream
    inp = mem.input("in", partitions=len(parts), event_time=lambda m: m[1])
    out = mem.output("panes")
    w = Windows.keyed_tumbling(lambda kv: kv.key, SIZE, init=int,
                               fold=lambda kv, n: n + kv.value[2],
                               event_time=lambda kv: kv.value[1])
    (app.input(inp).partition_by(lambda m: m[0], name="by-user")
     .window(w, name="w").send_to(app.output(out)))
    panes = TestRunner(app).add_input(inp, parts).run(timeout=RUN_TIMEOUT).messages(out)
    size_ms = int(SIZE_S * 1000)
    expected: Counter[tuple[str, str]] = Counter()
    for msgs in parts.values():
        for user, t, v in msgs:
            ms = round(t * 1000)
            expected[(user, str(ms - ms % size_ms))] += v
    got = Counter((p.key.key, p.key.pane_id) for p in panes)
    assert all(n == 1 for n in got.values()), f"a pane fired more than once: {got}"
    assert all(p.firing is FiringType.DEFAULT for p in panes)
    assert {(p.key.key, p.key.pane_id): p.message for p in panes} == dict(expected)


@PROPS
@given(parts=in_order_partitions(), concurrency=st.integers(1, 64),
       delays=st.lists(strategies.async_delays(0.01), min_size=1, max_size=8),
       ordering=st.sampled_from(["none", "key"]))
def test_event_time_panes_after_async_calls_do_not_depend_on_completion_order(
        parts: dict[int, list[tuple[str, float, int]]], concurrency: int, delays: list[float],
        ordering: str) -> None:
    """The input is in event-time order and declares it: the task's watermark counts a message
    once it and everything before it completed, so however the async calls complete, no message
    is late and the panes are the group-by."""
    sched = strategies.DelayScheduler()
    mem = MemorySystem()
    app = StreamApplication("async-wm", config={"task.max.concurrency": concurrency})
    inp = mem.input("in", partitions=len(parts), event_time=lambda m: m[1])
    out = mem.output("panes")

    async def call(m: tuple[str, float, int]) -> list[tuple[str, float, int]]:
        await sched.sleep(delays[(m[2] * 7 + int(m[1] * 1000)) % len(delays)], tag=m)
        return [m]

    key = (lambda m: m[0]) if ordering == "key" else None
    w = Windows.keyed_tumbling(lambda m: m[0], SIZE, init=int, fold=lambda m, n: n + m[2] + 1,
                               event_time=lambda m: m[1])
    (app.input(inp).async_flat_map(call, name="call", ordering=ordering, key=key)
     .window(w, name="w").send_to(app.output(out)))
    result = TestRunner(app).add_input(inp, parts).run(timeout=RUN_TIMEOUT)
    size_ms = int(SIZE_S * 1000)
    expected: Counter[tuple[int, str, str]] = Counter()
    for p, msgs in parts.items():
        for user, t, v in msgs:
            ms = round(t * 1000)
            expected[(p, user, str(ms - ms % size_ms))] += v + 1
    got = {(p, pane.key.key, pane.key.pane_id): pane.message
           for p, panes in result.partitions(out).items() for pane in panes}
    assert sum(len(panes) for panes in result.partitions(out).values()) == len(got)
    assert got == dict(expected)
    assert result.metrics.snapshot().get("async-wm-1-window-w.late-messages-dropped", 0) == 0


# --- (e) stream-stream join = reference model on a controllable clock -----------------------------

def run_on_clock(app: StreamApplication, inputs: dict[Any, dict[int, list[Any]]],
                 clock: Callable[[], int]) -> MemoryBroker:
    """TestRunner.run with the container's clock replaced."""
    _, broker, container = memory_job(app, {d.stream_id: parts for d, parts in inputs.items()},
                                      {}, {}, clock=clock)
    run_memory_container(container, RUN_TIMEOUT)
    return broker


def reference_join(messages: list[tuple[str, str, int, int]], ttl_ms: int
                   ) -> list[tuple[Any, Any]]:
    sides: tuple[dict[str, tuple[int, Any]], dict[str, tuple[int, Any]]] = ({}, {})
    out = []
    for m in messages:
        side, key, _, ts = m
        port = 0 if side == "L" else 1
        sides[port][key] = (ts, m)
        other = sides[1 - port].get(key)
        if other is not None and ts - other[0] < ttl_ms:
            out.append((m, other[1]) if port == 0 else (other[1], m))
    return out


def reference_join_no_ttl(parts: dict[int, list[tuple[str, str, int, int]]]) -> list[Any]:
    return [pair for msgs in parts.values() for pair in reference_join(msgs, 1 << 40)]


@st.composite
def join_inputs(draw: st.DrawFn) -> dict[int, list[tuple[str, str, int, int]]]:
    out = {}
    for p in range(draw(st.integers(1, 2))):
        n = draw(st.integers(0, 30))
        ts = 1_000_000
        msgs = []
        for i in range(n):
            ts += draw(st.integers(0, 400))
            msgs.append((draw(st.sampled_from("LR")), draw(st.sampled_from("xyz")), i, ts))
        out[p] = msgs
    return out


@PROPS
@given(parts=join_inputs(), ttl_ms=st.integers(1, 1000))
def test_join_equals_the_reference_model(parts: dict[int, list[tuple[str, str, int, int]]],
                                         ttl_ms: int) -> None:
    now = [0]

    def stamp(m: tuple[str, str, int, int]) -> tuple[str, str, int, int]:
        now[0] = m[3]  # the clock reads the timestamp of the message being processed
        return m

    mem = MemorySystem()
    # the model joins each partition as drawn, keys in any partition: no placement check
    app = StreamApplication("join", config={"task.join.partition.check": "off"})
    inp = mem.input("in", partitions=len(parts))
    out = mem.output("pairs")
    s = app.input(inp).map(stamp, name="stamp")
    left = s.filter(lambda m: m[0] == "L", name="left")
    right = s.filter(lambda m: m[0] == "R", name="right")
    left.join(right, key=lambda m: m[1], other_key=lambda m: m[1],
              combine=lambda lm, rm: (lm, rm), ttl=timedelta(milliseconds=ttl_ms),
              name="j").send_to(app.output(out))
    broker = run_on_clock(app, {inp: parts}, lambda: now[0])
    got = Counter(m for p in range(len(broker.streams["pairs"]))
                  for m in broker.messages("pairs", p))
    expected = Counter(pair for msgs in parts.values() for pair in reference_join(msgs, ttl_ms))
    # how many pairs the TTL cut: without it every message meeting an entry would pair
    event(f"the TTL cut pairs: {len(expected) < len(reference_join_no_ttl(parts))}")
    assert got == expected
