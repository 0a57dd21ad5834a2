"""The task run loop (docs/semantics.md rules 5, 9, 11, 12, 14): concurrency and ordering, per-key
order, window-tick exclusivity, callback timeouts, failures, blocking functions on the thread
pool, stream-stream joins on a controllable clock, and a clean shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import pytest

from runtime.engine.container import MemoryCheckpoints
from runtime.engine.job import SSP
from runtime.memory import MemoryBroker, memory_job
from runtime.testing import run_container as run_memory_container
from samza_dsl import KV, Context, FiringType, StreamApplication, Windows
from samza_dsl.errors import CallbackTimeout, TaskError
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner, strategies

RUN_TIMEOUT = 5.0


def run_container(app: StreamApplication, inputs: Mapping[Any, Mapping[int, list[Any]]], *,
                  checkpoints: MemoryCheckpoints | None = None,
                  clock: Callable[[], int] | None = None,
                  timeout: float = RUN_TIMEOUT) -> MemoryBroker:
    """What ``TestRunner.run`` does, with the checkpoint store and the clock supplied."""
    _, broker, container = memory_job(app, {d.stream_id: parts for d, parts in inputs.items()},
                                      {}, {}, checkpoints=checkpoints, clock=clock)
    run_memory_container(container, timeout)
    return broker


# --- a clean finish --------------------------------------------------------------------------------

@pytest.mark.parametrize("concurrency", [1, 2, 8])
def test_a_job_with_messages_in_flight_finishes_promptly(concurrency: int) -> None:
    """All messages done, the container must stop: its shutdown cancels the consumer, which
    must not swallow the cancellation (nor wait for room that never comes)."""
    mem = MemorySystem()
    app = StreamApplication("finish", config={"task.max.concurrency": concurrency})
    inp = mem.input("in", partitions=1)
    out = mem.output("out")

    async def call(m: int) -> list[int]:
        await asyncio.sleep((20 - m) * 0.0005)
        return [m]

    app.input(inp).async_flat_map(call, name="call").send_to(app.output(out))
    started = time.monotonic()
    result = TestRunner(app).add_input(inp, list(range(20))).run(timeout=2.0)
    assert sorted(result.messages(out)) == list(range(20))
    assert time.monotonic() - started < 2.0


# --- concurrency -----------------------------------------------------------------------------------

@pytest.mark.parametrize("concurrency", [1, 3, 16])
def test_at_most_max_concurrency_messages_are_in_flight_per_task(concurrency: int) -> None:
    active: dict[int, int] = defaultdict(int)
    most: dict[int, int] = defaultdict(int)
    mem = MemorySystem()
    app = StreamApplication("conc", config={"task.max.concurrency": concurrency})
    inp = mem.input("in", partitions=2)
    out = mem.output("out")

    async def call(m: tuple[int, int]) -> list[tuple[int, int]]:
        p = m[0]
        active[p] += 1
        most[p] = max(most[p], active[p])
        # at least 10 ms each: a loaded machine hands out the next messages before the first
        # complete, so the bound is reached, not only kept
        await asyncio.sleep(0.01 * (1 + m[1] % 3))
        active[p] -= 1
        return [m]

    app.input(inp).async_flat_map(call, name="call").send_to(app.output(out))
    parts = {p: [(p, i) for i in range(40)] for p in range(2)}
    result = TestRunner(app).add_input(inp, parts).run(timeout=RUN_TIMEOUT)
    assert most == {0: concurrency, 1: concurrency}
    got = result.partitions(out)
    assert {p: sorted(msgs) for p, msgs in got.items()} == parts
    if concurrency == 1:  # rule 11: one at a time keeps the partition's order
        assert got == parts


# --- (c) ordering="key" ----------------------------------------------------------------------------

def run_keyed(ordering: str) -> tuple[dict[str, list[int]], int]:
    """32 messages over 4 keys, later messages faster; returns the order per key at the sink and
    the most keys that had a call in flight at once."""
    sched = strategies.DelayScheduler()
    in_call: dict[str, int] = defaultdict(int)
    most_keys = [0]
    seen: dict[str, list[int]] = defaultdict(list)
    messages = [KV(k, i) for i in range(8) for k in "abcd"]
    mem = MemorySystem()
    app = StreamApplication("keyed", config={"task.max.concurrency": 32})
    inp = mem.input("in", partitions=1)

    async def call(m: KV[str, int]) -> list[KV[str, int]]:
        in_call[m.key] += 1
        most_keys[0] = max(most_keys[0], sum(1 for n in in_call.values() if n))
        await sched.sleep(0.001 * (40 - messages.index(m)))
        in_call[m.key] -= 1
        return [m]

    (app.input(inp).async_flat_map(call, name="call", ordering=ordering)
     .sink(lambda m: seen[m.key].append(m.value), name="seen"))
    TestRunner(app).add_input(inp, messages).run(timeout=RUN_TIMEOUT)
    return dict(seen), most_keys[0]


def test_ordering_key_keeps_per_key_order_while_keys_overlap() -> None:
    seen, most_keys = run_keyed("key")
    assert most_keys > 1, "keys ran one at a time"
    assert seen == {k: list(range(8)) for k in "abcd"}


def test_ordering_none_lets_completions_overtake() -> None:
    """The control: the same delays without per-key order do reorder within keys."""
    seen, most_keys = run_keyed("none")
    assert most_keys > 1
    assert {k: sorted(v) for k, v in seen.items()} == {k: list(range(8)) for k in "abcd"}
    assert seen != {k: list(range(8)) for k in "abcd"}


# --- exclusivity: window ticks never overlap a message in flight ---------------------------------

def test_window_ticks_run_only_when_nothing_is_in_flight_and_nothing_is_handed_out() -> None:
    started: set[int] = set()
    completed: set[int] = set()
    at_firing: list[tuple[int, int, int]] = []  # (in flight, started before, started after)
    n = 120
    mem = MemorySystem()
    app = StreamApplication("excl", config={"task.max.concurrency": 8})
    inp = mem.input("in", partitions=1)

    def start(m: int) -> int:
        started.add(m)
        return m

    async def call(m: int) -> list[int]:
        await asyncio.sleep(0.0005 * (m % 6))
        return [m]

    def end(m: int) -> int:
        completed.add(m)
        return m

    async def fired(pane: Any) -> None:
        before = len(started)
        await asyncio.sleep(0.002)  # a slow consumer of the pane: nothing may start meanwhile
        at_firing.append((len(started - completed), before, len(started)))

    # a processing-time window of 5 ms: panes close only at window ticks (or at the end)
    w = Windows.tumbling(timedelta(milliseconds=5))
    (app.input(inp).map(start, name="start").async_flat_map(call, name="call")
     .map(end, name="end").window(w, name="w").sink(fired, name="fired"))
    TestRunner(app).add_input(inp, list(range(n))).run(timeout=RUN_TIMEOUT)
    assert completed == set(range(n))
    during = [f for f in at_firing if f[1] < n]
    assert during, "no window tick fired while the input was being processed"
    for in_flight, before, after in at_firing:
        assert in_flight == 0, "a window tick ran while a message was in flight"
        assert before == after, "a message was handed out while a window tick ran"


# --- callback timeout ------------------------------------------------------------------------------

def test_a_hanging_call_fails_its_task_with_callback_timeout() -> None:
    mem = MemorySystem()
    app = StreamApplication("hang", config={"task.callback.timeout.ms": 50,
                                            "task.max.concurrency": 2})
    inp = mem.input("in", partitions=2)
    out = mem.output("out")

    async def call(m: tuple[int, int]) -> list[tuple[int, int]]:
        if m == (1, 3):
            await asyncio.Event().wait()  # never set
        await asyncio.sleep(0.001)
        return [m]

    app.input(inp).async_flat_map(call, name="call").send_to(app.output(out))
    parts = {p: [(p, i) for i in range(10)] for p in range(2)}
    started = time.monotonic()
    with pytest.raises(CallbackTimeout) as err:
        TestRunner(app).add_input(inp, parts).run(timeout=3.0)
    elapsed = time.monotonic() - started
    assert elapsed < 2.0, f"the timeout took {elapsed:.2f}s to fire"
    e = err.value
    assert isinstance(e, TaskError)
    assert (e.task, e.stream, e.partition, e.offset) == ("Partition 1", "in", 1, 3)
    text = str(e)
    assert "Partition 1" in text and "task.callback.timeout.ms=50" in text


def test_without_a_callback_timeout_slow_calls_just_take_time() -> None:
    mem = MemorySystem()
    app = StreamApplication("slow", config={"task.callback.timeout.ms": 1000})
    inp = mem.input("in", partitions=1)
    out = mem.output("out")

    async def call(m: int) -> list[int]:
        await asyncio.sleep(0.06)  # longer than a 50 ms timeout would allow
        return [m]

    app.input(inp).async_flat_map(call, name="call").send_to(app.output(out))
    assert TestRunner(app).add_input(inp, [1, 2]).run(timeout=RUN_TIMEOUT).messages(out) == [1, 2]


# --- failures ----------------------------------------------------------------------------------------

def test_a_failing_map_names_operator_task_stream_partition_offset_and_no_checkpoint_covers_it(
        ) -> None:
    fail_at = 150
    mem = MemorySystem()
    app = StreamApplication("fail", config={"task.max.concurrency": 4, "task.commit.ms": 1})
    inp = mem.input("in", partitions=2)
    out = mem.output("out")

    async def slow(m: tuple[int, int]) -> list[tuple[int, int]]:
        await asyncio.sleep(0.0005)
        return [m]

    def boom(m: tuple[int, int]) -> tuple[int, int]:
        if m == (1, fail_at):
            raise ValueError("bad message")
        return m

    app.input(inp).async_flat_map(slow, name="slow").map(boom, name="boom").send_to(
        app.output(out))
    checkpoints = MemoryCheckpoints()
    with pytest.raises(TaskError) as err:
        run_container(app, {inp: {0: [(0, i) for i in range(10)],
                                  1: [(1, i) for i in range(200)]}}, checkpoints=checkpoints)
    e = err.value
    assert (e.op_id, e.task, e.stream, e.partition, e.offset) == \
        ("fail-1-map-boom", "Partition 1", "in", 1, fail_at)
    for fragment in ("fail-1-map-boom", "Partition 1", "'in'", "partition 1", f"offset {fail_at}",
                     "bad message"):
        assert fragment in str(e), fragment
    assert isinstance(e.__cause__, ValueError)
    written = [cps[SSP("in", 1)] for name, cps in checkpoints.history if SSP("in", 1) in cps]
    assert written, "no commit before the failure: the test proves nothing"
    assert max(written) < fail_at


@pytest.mark.parametrize("pool", [0, 2])
def test_a_failure_inside_a_chain_of_synchronous_operators_names_the_failing_one(
        pool: int) -> None:
    def boom(m: int) -> int:
        if m == 5:
            raise ValueError("five")
        return m

    mem = MemorySystem()
    app = StreamApplication("chain", config={"job.container.thread.pool.size": pool})
    inp = mem.input("in", partitions=1)
    out = mem.output("out")
    (app.input(inp).map(lambda m: m, name="a").filter(lambda m: True, name="b")
     .map(boom, name="c").map(lambda m: m, name="d").send_to(app.output(out)))
    with pytest.raises(TaskError) as err:
        TestRunner(app).add_input(inp, list(range(10))).run(timeout=RUN_TIMEOUT)
    assert (err.value.op_id, err.value.offset) == ("chain-1-map-c", 5)


def test_a_failing_async_call_names_the_async_operator() -> None:
    mem = MemorySystem()
    app = StreamApplication("afail", config={"task.max.concurrency": 4})
    inp = mem.input("in", partitions=1)
    out = mem.output("out")

    async def call(m: int) -> list[int]:
        await asyncio.sleep(0.001)
        if m == 7:
            raise KeyError("no such thing")
        return [m]

    app.input(inp).async_flat_map(call, name="call").send_to(app.output(out))
    with pytest.raises(TaskError) as err:
        TestRunner(app).add_input(inp, list(range(20))).run(timeout=RUN_TIMEOUT)
    e = err.value
    assert (e.op_id, e.task, e.stream, e.partition, e.offset) == \
        ("afail-1-async_flat_map-call", "Partition 0", "in", 0, 7)
    assert not isinstance(e, CallbackTimeout)


# --- user function objects ---------------------------------------------------------------------------

def test_each_task_initialises_its_own_user_function_object() -> None:
    """``init(ctx)`` gives a function its task (and the task's tables): with one shared object
    the last task's init would win for every task. As in Samza, each task gets its own copy."""
    closed: list[str] = []

    class Tag:
        task = "?"

        def init(self, ctx: Context) -> None:
            self.task = ctx.task_name

        def __call__(self, m: int) -> tuple[str, int]:
            return (self.task, m)

        def close(self) -> None:
            closed.append(self.task)

    mem = MemorySystem()
    app = StreamApplication("init")
    inp = mem.input("in", partitions=3)
    out = mem.output("out")
    app.input(inp).map(Tag(), name="tag").send_to(app.output(out))
    result = TestRunner(app).add_input(inp, {0: [0], 1: [1], 2: [2]}).run(timeout=RUN_TIMEOUT)
    assert result.partitions(out) == {p: [(f"Partition {p}", p)] for p in range(3)}
    assert sorted(closed) == ["Partition 0", "Partition 1", "Partition 2"]


def test_a_function_object_that_cannot_be_deep_copied_still_gets_per_task_init() -> None:
    """An object holding a lock (or a client) cannot be deep-copied; it must still not be
    shared by the tasks, or the last task's init wins for all of them."""

    class Tag:
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.task = "?"

        def init(self, ctx: Context) -> None:
            self.task = ctx.task_name

        def __call__(self, m: int) -> tuple[str, int]:
            with self.lock:
                return (self.task, m)

    mem = MemorySystem()
    app = StreamApplication("lock")
    inp = mem.input("in", partitions=2)
    out = mem.output("out")
    app.input(inp).map(Tag(), name="tag").send_to(app.output(out))
    result = TestRunner(app).add_input(inp, {0: [0], 1: [1]}).run(timeout=RUN_TIMEOUT)
    assert result.partitions(out) == {p: [(f"Partition {p}", p)] for p in range(2)}


@pytest.mark.parametrize("partitions", [1, 2])
def test_functions_without_init_are_the_users_own_objects(partitions: int) -> None:
    """Only an object with ``init(ctx)`` has per-task state to keep apart. A bound method, a
    callable object without init, a closure: the user's own object receives the messages, as a
    user collecting results in a test expects."""

    class Collector:
        def __init__(self) -> None:
            self.items: list[int] = []

        def add(self, m: int) -> None:
            self.items.append(m)

    class Count:
        def __init__(self) -> None:
            self.n = 0

        def __call__(self, m: int) -> None:
            self.n += 1

    collector, count, seen = Collector(), Count(), []
    mem = MemorySystem()
    app = StreamApplication("own")
    inp = mem.input("in", partitions=partitions)
    s = app.input(inp)
    s.sink(collector.add, name="method")
    s.sink(count, name="callable")
    s.sink(lambda m: seen.append(m), name="closure")
    parts = {p: [p * 10 + i for i in range(3)] for p in range(partitions)}
    TestRunner(app).add_input(inp, parts).run(timeout=RUN_TIMEOUT)
    everything = sorted(m for msgs in parts.values() for m in msgs)
    assert sorted(seen) == everything
    assert sorted(collector.items) == everything
    assert count.n == len(everything)


# --- blocking functions on the thread pool ---------------------------------------------------------

@pytest.mark.parametrize("pool", [0, 3])
def test_blocking_functions_run_on_the_container_thread_pool(pool: int) -> None:
    lock = threading.Lock()
    threads: set[str] = set()
    async_threads: set[str] = set()
    active = [0, 0]  # now, most at once
    mem = MemorySystem()
    app = StreamApplication("pool", config={"job.container.thread.pool.size": pool,
                                            "task.max.concurrency": 8})
    inp = mem.input("in", partitions=1)
    out = mem.output("out")

    def blocking(m: int) -> int:
        with lock:
            threads.add(threading.current_thread().name)
            active[0] += 1
            active[1] = max(active)
        time.sleep(0.003)
        with lock:
            active[0] -= 1
        return m

    async def call(m: int) -> list[int]:
        async_threads.add(threading.current_thread().name)
        return [m]

    (app.input(inp).map(blocking, name="blocking").async_flat_map(call, name="call")
     .send_to(app.output(out)))
    result = TestRunner(app).add_input(inp, list(range(30))).run(timeout=RUN_TIMEOUT)
    assert sorted(result.messages(out)) == list(range(30))
    loop_thread = threading.current_thread().name  # TestRunner runs its loop in this thread
    assert async_threads == {loop_thread}
    if pool == 0:
        assert threads == {loop_thread}
        assert active[1] == 1
    else:
        assert loop_thread not in threads
        assert all(t.startswith("samza-task") for t in threads), threads
        assert 1 < len(threads) <= pool
        assert 1 < active[1] <= pool


# --- stream-stream join on a controllable clock ----------------------------------------------------

def join_app(ttl_ms: int, now: list[int]) -> tuple[StreamApplication, Any, Any]:
    """One input of (side, key, value, ts): the clock reads the ts of the message being
    processed; "L"/"R" messages form the two sides."""

    def stamp(m: tuple[str, Any, str, int]) -> tuple[str, Any, str, int]:
        now[0] = m[3]
        return m

    mem = MemorySystem()
    app = StreamApplication("join")
    inp = mem.input("in", partitions=1)
    out = mem.output("pairs")
    s = app.input(inp).map(stamp, name="stamp")
    left = s.filter(lambda m: m[0] == "L", name="left")
    right = s.filter(lambda m: m[0] == "R", name="right")
    left.join(right, key=lambda m: m[1], other_key=lambda m: m[1],
              combine=lambda lm, rm: (lm[2], rm[2]), ttl=timedelta(milliseconds=ttl_ms),
              name="j").send_to(app.output(out))
    return app, inp, out


def run_join(messages: list[tuple[str, Any, str, int]], ttl_ms: int) -> list[Any]:
    now = [0]
    app, inp, out = join_app(ttl_ms, now)
    broker = run_container(app, {inp: {0: messages}}, clock=lambda: now[0])
    return broker.messages("pairs", 0)


def test_join_emits_only_while_the_other_side_is_younger_than_the_ttl() -> None:
    pairs = run_join([
        ("L", "k", "l1", 1000),
        ("R", "k", "r1", 1999),   # 999 ms after l1: joins
        ("R", "k", "r2", 2000),   # 1000 ms after l1: the TTL is strict, no join
        ("L", "k", "l2", 2500),   # 500 ms after r2 (the latest right): joins r2, not r1
        ("R", "j", "r3", 2600),   # another key: nothing on the left
        ("L", "j", "l3", 3599),   # 999 ms after r3: joins
        ("L", "j", "l4", 3600),   # 1000 ms after r3: expired
    ], ttl_ms=1000)
    assert pairs == [("l1", "r1"), ("l2", "r2"), ("l3", "r3")]


def test_join_keeps_the_latest_message_per_key_per_side_and_combines_left_first() -> None:
    pairs = run_join([
        ("R", "k", "r1", 0),
        ("R", "k", "r2", 10),     # replaces r1
        ("L", "k", "l1", 20),     # right arrived first: still combine(left, right)
        ("L", "k", "l2", 30),     # replaces l1, joins the latest right again
        ("R", "k", "r3", 40),     # joins the latest left only
    ], ttl_ms=10_000)
    assert pairs == [("l1", "r2"), ("l2", "r2"), ("l2", "r3")]


def test_join_with_a_none_key_fails_the_task_naming_the_join() -> None:
    with pytest.raises(TaskError) as err:
        run_join([("L", None, "l1", 0)], ttl_ms=1000)
    assert err.value.op_id == "join-1-join-j"
    assert err.value.offset == 0


def test_join_pairs_messages_through_the_testrunner_on_real_time() -> None:
    mem = MemorySystem()
    # keys put in partitions by hand (u1 belongs to partition 0): no placement check
    app = StreamApplication("rt-join", config={"task.join.partition.check": "off"})
    views = mem.input("views", partitions=2)
    clicks = mem.input("clicks", partitions=2)
    out = mem.output("joined")
    app.input(views).join(app.input(clicks), key=lambda v: v[0], other_key=lambda c: c[0],
                          combine=lambda v, c: (v[0], v[1], c[1]), ttl=timedelta(minutes=10),
                          name="vc").send_to(app.output(out))
    result = (TestRunner(app)
              .add_input(views, {0: [("u0", "home")], 1: [("u1", "cart")]})
              .add_input(clicks, {0: [("u0", "buy")], 1: [("u1", "pay"), ("u9", "x")]})
              .run(timeout=RUN_TIMEOUT))
    assert result.partitions(out) == {0: [("u0", "home", "buy")], 1: [("u1", "cart", "pay")]}


# --- windows in the loop -----------------------------------------------------------------------------

def test_processing_time_tumbling_panes_close_at_ticks_and_cover_every_message_once() -> None:
    mem = MemorySystem()
    app = StreamApplication("ticks")
    inp = mem.input("in", partitions=1)
    out = mem.output("panes")

    async def slow(m: int) -> list[int]:
        await asyncio.sleep(0.002)
        return [m]

    (app.input(inp).async_flat_map(slow, name="slow")
     .window(Windows.tumbling(timedelta(milliseconds=20)), name="w").send_to(app.output(out)))
    panes = TestRunner(app).add_input(inp, list(range(40))).run(timeout=RUN_TIMEOUT).messages(out)
    assert len(panes) > 1, "everything landed in one pane: no tick closed a pane"
    assert all(p.firing is FiringType.DEFAULT for p in panes)
    ids = [int(p.key.pane_id) for p in panes]
    assert all(i % 20 == 0 for i in ids)
    assert ids == sorted(set(ids))  # each pane once, in time order
    assert [m for p in panes for m in p.message] == list(range(40))
