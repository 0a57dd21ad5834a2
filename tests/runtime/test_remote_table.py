"""Remote tables (docs/semantics.md rule 19) against a real HTTP service on 127.0.0.1
(``samza_dsl.testing.kv_service``): joins, writes, ``ctx.table``, retries, the rate limit (by
the clock), the cache, batching, ``task.max.concurrency``, ``task.callback.timeout.ms`` and the
checkpoint held back by a slow write."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runtime.engine.container import MemoryCheckpoints
from runtime.engine.job import SSP
from runtime.memory import memory_job
from runtime.state.remote import RemoteTableClient, TokenBucket, container_limiter
from runtime.testing import run_container
from samza_dsl import KV, CacheSpec, RetryPolicy, StreamApplication
from samza_dsl.errors import CallbackTimeout, PlanError, RemoteTableError, TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.spec import RemoteTableSpec
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner
from samza_dsl.testing.kv_service import HttpKV, KVService

FAST_RETRY = RetryPolicy(max_attempts=3, backoff=0.02, max_backoff=0.1, jitter=0.5)


@pytest.fixture
def service() -> Iterator[KVService]:
    with KVService({"u1": "Ada", "u2": "Bob", "u3": "Cy"}) as s:
        yield s


def join_app(kv: HttpKV, *, config: dict[str, Any] | None = None, partitions: int = 1,
             **table: Any) -> tuple[StreamApplication, Any]:
    """ids -> join_table(names) -> out: (id, name or None)."""
    mem = MemorySystem()
    app = StreamApplication("remote-join", config=config or {})
    names = app.remote_table("names", read=kv.read, write=kv.write, **table)
    ids = mem.input("ids", partitions=partitions)
    app.input(ids).map(lambda i: KV(i, None)).join_table(
        names, combine=lambda m, r: (m.key, r.value if r else None), name="names").send_to(
        app.output(mem.output("out", partitions=partitions)))
    return app, ids


class PutUnawaited:
    """A user function that starts ``ctx.table("names").put(*entry(m))`` without awaiting it,
    and passes ``m`` on."""

    def __init__(self, entry: Callable[[Any], tuple[Any, Any]]) -> None:
        self.entry = entry

    def init(self, ctx: Any) -> None:
        self.names = ctx.table("names")

    def __call__(self, m: Any) -> Any:
        self.names.put(*self.entry(m))
        return m


def gets(service: KVService, key: str | None = None) -> list[float]:
    return [t for t, method, keys in service.log
            if method == "GET" and (key is None or key in keys)]


# --- join_table, send_to, ctx.table -------------------------------------------------------------

def test_join_table_reads_each_message_s_record_from_the_service(service: KVService) -> None:
    app, ids = join_app(HttpKV(service.url), config={"task.max.concurrency": 4})
    out = TestRunner(app).add_input(ids, ["u1", "u9", "u2", "u3", "u1"]).run().messages("out")
    assert sorted(out, key=repr) == sorted([("u1", "Ada"), ("u9", None), ("u2", "Bob"), ("u3", "Cy"),
                                            ("u1", "Ada")], key=repr)
    assert len(gets(service)) == 5  # no cache: every message asks the service


def test_send_to_a_remote_table_puts_and_deletes(service: KVService) -> None:
    kv = HttpKV(service.url)
    mem = MemorySystem()
    app = StreamApplication("remote-write", config={"task.max.concurrency": 8})
    names = app.remote_table("names", write=kv.write)
    updates = mem.input("updates")
    app.input(updates).map(lambda u: KV(u[0], u[1])).send_to(names)
    TestRunner(app).add_input(updates, [("u4", "Dee"), ("u1", None), ("u2", "Bo"),
                                        ("u4", "Di")]).run()
    assert service.data == {"u2": "Bo", "u3": "Cy", "u4": "Di"}  # u4's writes kept their order


def test_ctx_table_gives_async_get_put_get_all_put_all_delete(service: KVService) -> None:
    kv = HttpKV(service.url)
    mem = MemorySystem()
    app = StreamApplication("remote-ctx", config={"task.max.concurrency": 1})
    app.remote_table("names", read=kv.read, write=kv.write)

    class Rename:
        def init(self, ctx: Any) -> None:
            self.names = ctx.table("names")

        async def __call__(self, cmd: tuple[Any, ...]) -> list[Any]:
            t = self.names
            if cmd[0] == "get":
                return [await t.get(cmd[1])]
            if cmd[0] == "put":
                await t.put(cmd[1], cmd[2])
            elif cmd[0] == "put_all":
                await t.put_all([KV(k, v) for k, v in cmd[1]])
            elif cmd[0] == "delete":
                await t.delete(cmd[1])
            elif cmd[0] == "get_all":
                return [await t.get_all(cmd[1])]
            return []

    cmds = mem.input("cmds")
    app.input(cmds).async_flat_map(Rename(), name="rename").send_to(app.output(mem.output("out")))
    out = TestRunner(app).add_input(cmds, [
        ("put", "u4", "Dee"), ("get", "u4"), ("delete", "u1"), ("get", "u1"),
        ("put_all", [("u5", "Eve"), ("u2", None)]), ("get_all", ["u1", "u2", "u3", "u5"]),
    ]).run().messages("out")
    assert out == ["Dee", None, {"u3": "Cy", "u5": "Eve"}]
    assert service.data == {"u3": "Cy", "u4": "Dee", "u5": "Eve"}


def test_a_put_a_sync_function_does_not_await_still_completes_with_its_message(
        service: KVService) -> None:
    kv = HttpKV(service.url)
    service.slow("u7", 0.2)
    mem = MemorySystem()
    app = StreamApplication("remote-unawaited", config={"task.max.concurrency": 4})
    app.remote_table("names", write=kv.write)

    ids = mem.input("ids")  # each put is started, and tied to its message
    app.input(ids).map(lambda i: KV(i, i.upper())).map(PutUnawaited(tuple)).send_to(
        app.output(mem.output("out")))
    TestRunner(app).add_input(ids, ["u7", "u8"]).run()
    assert service.data["u7"] == "U7" and service.data["u8"] == "U8"


def test_a_failing_put_nobody_awaited_fails_the_task_naming_the_offset(service: KVService) -> None:
    kv = HttpKV(service.url)
    service.fail("u8", times=10)
    mem = MemorySystem()
    app = StreamApplication("remote-unawaited-fail")
    app.remote_table("names", write=kv.write)

    ids = mem.input("ids")
    app.input(ids).map(PutUnawaited(lambda k: (k, "x"))).send_to(app.output(mem.output("out")))
    with pytest.raises(TaskError) as err:
        TestRunner(app).add_input(ids, ["u7", "u8"]).run()
    text = str(err.value)
    assert "remote table 'names'" in text and "offset 1" in text and "'u8'" in text, text


# --- retries --------------------------------------------------------------------------------------

def test_injected_500s_are_retried_with_growing_backoff(service: KVService) -> None:
    service.fail("u2", times=2, status=500)
    policy = RetryPolicy(max_attempts=3, backoff=0.05, max_backoff=1.0, jitter=0.2)
    app, ids = join_app(HttpKV(service.url), retry=policy)
    out = TestRunner(app).add_input(ids, ["u2"]).run().messages("out")
    assert out == [("u2", "Bob")]
    times = gets(service, "u2")
    assert len(times) == 3
    first, second = times[1] - times[0], times[2] - times[1]
    assert 0.05 * 0.8 <= first < 0.05 + 0.5, first  # backoff less up to 20% jitter
    assert 0.1 * 0.8 <= second < 0.1 + 0.5, second  # doubled
    assert second > first


def test_a_call_still_failing_after_its_attempts_fails_the_task_naming_table_key_attempts(
        service: KVService) -> None:
    service.fail("u2", times=10, status=503)
    app, ids = join_app(HttpKV(service.url), retry=FAST_RETRY)
    with pytest.raises(TaskError) as err:
        TestRunner(app).add_input(ids, ["u1", "u2"]).run()
    text = str(err.value)
    assert "remote table 'names'" in text and "key 'u2'" in text and "3 attempts" in text, text
    assert "offset 1" in text and "join_table-names" in text
    cause = err.value.__cause__
    assert isinstance(cause, RemoteTableError)
    assert (cause.table, cause.key, cause.attempts) == ("names", "u2", 3)
    assert len(gets(service, "u2")) == 3


def test_an_error_the_policy_does_not_name_fails_at_once() -> None:
    async def read(key: str) -> str:
        raise KeyError(key)

    mem = MemorySystem()
    app = StreamApplication("remote-no-retry")
    t = app.remote_table("names", read=read, retry=RetryPolicy(max_attempts=5))
    ids = mem.input("ids")
    app.input(ids).map(lambda i: KV(i, 1)).join_table(t, combine=lambda m, r: m).send_to(
        app.output(mem.output("out")))
    with pytest.raises(TaskError) as err:
        TestRunner(app).add_input(ids, ["k"]).run()
    assert isinstance(err.value.__cause__, RemoteTableError)
    assert err.value.__cause__.attempts == 1
    assert "KeyError is not an error the table's retry policy retries" in str(err.value)


def test_retry_if_names_errors_by_predicate() -> None:
    calls: list[int] = []

    class Flaky(Exception):
        def __init__(self, code: int) -> None:
            super().__init__(code)
            self.code = code

    async def read(key: str) -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Flaky(429)
        return "ok"

    policy = RetryPolicy(max_attempts=4, backoff=0.001, retry_on=(),
                         retry_if=lambda e: getattr(e, "code", 0) == 429)
    mem = MemorySystem()
    app = StreamApplication("remote-retry-if")
    t = app.remote_table("t", read=read, retry=policy)
    ids = mem.input("ids")
    app.input(ids).map(lambda i: KV(i, 1)).join_table(
        t, combine=lambda m, r: r.value if r else None).send_to(app.output(mem.output("out")))
    assert TestRunner(app).add_input(ids, ["k"]).run().messages("out") == ["ok"]
    assert len(calls) == 3


# --- the rate limit, by the clock ----------------------------------------------------------------

def test_the_rate_limit_holds_for_the_container_s_tasks_together(service: KVService) -> None:
    rate, n = 40.0, 60
    app, ids = join_app(HttpKV(service.url), rate_limit=rate, partitions=2,
                        config={"task.max.concurrency": 16})
    keys = [f"u{i % 3 + 1}" for i in range(n)]
    result = TestRunner(app).add_input(ids, {0: keys[:n // 2], 1: keys[n // 2:]}).run()
    assert len(result.messages("out")) == n
    times = sorted(gets(service))
    assert len(times) == n
    burst = max(1.0, rate / 20)
    # two tasks, one bucket: n calls take (n - burst) / rate s, not half of it
    assert times[-1] - times[0] >= (n - burst) / rate - 0.05, times[-1] - times[0]
    # and no second of the run has more than burst + rate calls (a few more may arrive together
    # when the job's process was held up on a busy machine)
    for i, t in enumerate(times):
        window = [u for u in times[i:] if u - t <= 1.0]
        assert len(window) <= burst + rate * 1.0 + 4, (t, len(window))


def test_a_container_gets_its_share_of_the_job_s_rate() -> None:
    spec = RemoteTableSpec("t", rate_limit=100.0)
    shared: dict[str, Any] = {}
    bucket = container_limiter(shared, spec, 0.25)
    assert bucket is not None and bucket.rate == 25.0
    assert container_limiter(shared, spec, 0.25) is bucket  # one per container
    assert container_limiter({}, RemoteTableSpec("t"), 1.0) is None


def test_the_token_bucket_spaces_calls_by_the_clock() -> None:
    async def main() -> list[float]:
        bucket = TokenBucket(50.0, burst=1.0)
        stamps: list[float] = []

        async def one() -> None:
            await bucket.acquire()
            stamps.append(time.monotonic())
        await asyncio.gather(*(one() for _ in range(26)))
        return stamps

    stamps = asyncio.run(main())
    assert 0.5 - 0.02 <= stamps[-1] - stamps[0] < 0.5 + 0.4


# --- concurrency, the callback timeout, the checkpoint -------------------------------------------

@pytest.mark.parametrize("concurrency", [1, 4])
def test_calls_count_towards_task_max_concurrency(service: KVService, concurrency: int) -> None:
    service.latency = 0.1
    app, ids = join_app(HttpKV(service.url), config={"task.max.concurrency": concurrency})
    TestRunner(app).add_input(ids, [f"u{i % 3 + 1}" for i in range(3 * concurrency)]).run()
    assert service.max_in_flight == concurrency


def test_a_message_that_fans_out_still_makes_at_most_max_concurrency_calls(
        service: KVService) -> None:
    service.latency = 0.02
    kv = HttpKV(service.url)
    mem = MemorySystem()
    app = StreamApplication("remote-fan-out", config={"task.max.concurrency": 3})
    app.remote_table("names", read=kv.read)

    class Many:
        def init(self, ctx: Any) -> None:
            self.t = ctx.table("names")

        async def __call__(self, n: int) -> list[Any]:
            return [len(await self.t.get_all([f"u{i}" for i in range(n)]))]

    sizes = mem.input("sizes")
    app.input(sizes).async_flat_map(Many()).send_to(app.output(mem.output("out")))
    assert TestRunner(app).add_input(sizes, [12, 12]).run().messages("out") == [3, 3]
    assert service.max_in_flight == 3


def test_a_hanging_remote_call_fails_with_the_callback_timeout(service: KVService) -> None:
    service.slow("u2", 6.0)
    app, ids = join_app(HttpKV(service.url), config={"task.callback.timeout.ms": 300})
    started = time.monotonic()
    with pytest.raises(CallbackTimeout) as err:
        TestRunner(app).add_input(ids, ["u1", "u2"]).run()
    assert time.monotonic() - started < 5.0
    assert "offset 1" in str(err.value)


class TimedCheckpoints(MemoryCheckpoints):
    def __init__(self) -> None:
        super().__init__()
        self.timed: list[tuple[float, int]] = []

    def write(self, task_name: str, offsets: Any, changelogs: Any = None) -> None:
        super().write(task_name, offsets, changelogs)
        if SSP("updates", 0) in offsets:
            self.timed.append((time.monotonic(), offsets[SSP("updates", 0)]))


@pytest.mark.parametrize("how", ["send_to", "unawaited put"])
@pytest.mark.parametrize("async_commit", [True, False])
def test_no_checkpoint_covers_a_message_whose_remote_write_is_in_flight(
        service: KVService, how: str, async_commit: bool) -> None:
    done_at: dict[str, float] = {}

    class Timed(HttpKV):
        async def write(self, key: str, value: Any) -> None:
            await super().write(key, value)
            done_at[key] = time.monotonic()

    write = Timed(service.url).write

    service.slow("slow", 0.6)
    mem = MemorySystem()
    app = StreamApplication("remote-checkpoint", config={
        "task.max.concurrency": 8, "task.commit.ms": 20, "task.async.commit": async_commit})
    table = app.remote_table("names", write=write)
    updates = mem.input("updates")
    stream = app.input(updates).map(lambda k: KV(k, k.upper()))
    if how == "send_to":
        stream.send_to(table)
    else:
        stream.sink(PutUnawaited(tuple), name="put")
    keys = ["a", "b", "slow", "c", "d", "e"]
    checkpoints = TimedCheckpoints()
    _, _, container = memory_job(app, {"updates": {0: keys}}, {}, {}, checkpoints=checkpoints)
    run_container(container, timeout=10)
    slow_offset = keys.index("slow")
    finished = done_at["slow"]
    before = [off for t, off in checkpoints.timed if t < finished]
    if async_commit:  # commits overlap messages in flight: some came during the slow write
        assert before, "no checkpoint was written while the slow write was in flight"
    assert all(off < slow_offset for off in before), (before, slow_offset)
    assert checkpoints.timed[-1][1] == len(keys) - 1
    assert service.data["slow"] == "SLOW"


# --- the cache --------------------------------------------------------------------------------------

def test_the_cache_answers_repeated_reads_until_the_ttl(service: KVService) -> None:
    app, ids = join_app(HttpKV(service.url), cache=CacheSpec(ttl=0.3, size=10))
    runner = TestRunner(app).add_input(ids, ["u1", "u1", "u2", "u1"])
    assert runner.run().messages("out") == [("u1", "Ada"), ("u1", "Ada"), ("u2", "Bob"),
                                             ("u1", "Ada")]
    assert len(gets(service, "u1")) == 1 and len(gets(service, "u2")) == 1


def cache_client(read: Any, write: Any, cache: CacheSpec, now: list[float]) -> RemoteTableClient:
    spec = RemoteTableSpec("t", read=read, write=write, cache=cache)
    return RemoteTableClient(spec, task_name="Partition 0", limiter=None, track=lambda c: None,
                             clock=lambda: now[0])


@pytest.mark.parametrize("mode", ["through", "around"])
def test_writes_go_through_or_around_the_cache(mode: str) -> None:
    store: dict[str, str] = {"k": "old"}
    reads: list[str] = []

    async def read(key: str) -> str | None:
        reads.append(key)
        return store.get(key)

    async def write(key: str, value: str | None) -> None:
        store[key] = value  # type: ignore[assignment]

    now = [0.0]
    client = cache_client(read, write, CacheSpec(ttl=10, size=5, write=mode), now)

    async def main() -> list[Any]:
        first = await client.read("k")
        await client.write("k", "new")
        second = await client.read("k")
        await client.write("k", None)
        third = client.cached("k")
        now[0] = 20.0
        return [first, second, third]

    first, second, third = asyncio.run(main())
    assert (first, second) == ("old", "new")
    assert third is client.MISS  # a delete drops the key
    assert reads == (["k"] if mode == "through" else ["k", "k"])


def test_the_cache_keeps_the_most_recently_used_keys_and_expires_by_ttl() -> None:
    async def read(key: int) -> int:
        return key * 10

    now = [0.0]
    client = cache_client(read, None, CacheSpec(ttl=5, size=2), now)

    async def main() -> None:
        for k in (1, 2, 1, 3):  # 2 is the least recently used when 3 comes
            await client.read(k)

    asyncio.run(main())
    assert client.cached(1) == 10 and client.cached(3) == 30
    assert client.cached(2) is client.MISS
    now[0] = 6.0
    assert client.cached(1) is client.MISS


# --- batching -------------------------------------------------------------------------------------

def batched_join(service: KVService, keys: list[str], *, concurrency: int, batch_size: int,
                 combine: Callable[[Any, Any], Any]) -> tuple[list[Any], list[tuple[str, ...]]]:
    """ids -> join_table(names, through read_all only) -> out: the outputs and the keys of each
    batch the service got."""
    kv = HttpKV(service.url)
    mem = MemorySystem()
    app = StreamApplication("remote-batch", config={"task.max.concurrency": concurrency})
    names = app.remote_table("names", read_all=kv.read_all, batch_size=batch_size)
    ids = mem.input("ids")
    app.input(ids).map(lambda i: KV(i, None)).join_table(names, combine=combine).send_to(
        app.output(mem.output("out")))
    out = TestRunner(app).add_input(ids, keys).run().messages("out")
    return out, [keys_ for _, method, keys_ in service.log if method == "POST"]


def test_reads_of_one_turn_go_out_as_one_batch(service: KVService) -> None:
    service.latency = 0.02
    keys = [f"u{i % 4 + 1}" for i in range(100)]
    out, batches = batched_join(service, keys, concurrency=50, batch_size=20,
                                combine=lambda m, r: r.value if r else "-")
    assert sorted(out) == sorted({"u1": "Ada", "u2": "Bob", "u3": "Cy"}.get(k, "-") for k in keys)
    assert max(len(b) for b in batches) <= 20
    assert len(batches) < 20  # one call per key would be 100


def test_reads_go_out_in_overlapping_batches_of_an_eighth_of_the_concurrency() -> None:
    """At ``task.max.concurrency`` 64 a batch of reads goes out at 8 keys (``OVERLAP``), not at
    ``batch_size``: several batches wait on the service at once."""
    from runtime.state.remote import OVERLAP

    with KVService({f"k{i}": i for i in range(200)}, latency=0.02) as service:
        keys = [f"k{i}" for i in range(200)]
        out, batches = batched_join(service, keys, concurrency=64, batch_size=100,
                                    combine=lambda m, r: (m.key, r.value))
        assert sorted(out) == sorted((f"k{i}", i) for i in range(200))
        assert max(len(b) for b in batches) == 64 // OVERLAP
        assert sum(len(b) for b in batches) == 200
        assert service.max_in_flight >= 2  # the batches overlap


# --- the API and the planners -----------------------------------------------------------------------

def test_remote_table_settings_are_checked() -> None:
    app = StreamApplication("checks")

    async def read(k: Any) -> Any:
        return None

    with pytest.raises(ValueError, match="rate_limit"):
        app.remote_table("a", read=read, rate_limit=0)
    with pytest.raises(ValueError, match="needs a read or a write"):
        app.remote_table("a")
    with pytest.raises(TypeError, match="RetryPolicy"):
        app.remote_table("a", read=read, retry=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=2)
    with pytest.raises(ValueError, match="write"):
        CacheSpec(ttl=1, size=1, write="back")
    assert app.remote_table("a", read=read).spec == app.remote_table("a", read=read).spec
    with pytest.raises(PlanError, match="registered twice with different settings"):
        app.remote_table("a", read=read, rate_limit=10)
    with pytest.raises(PlanError, match="already a local table"):
        app.table("b", serde=KVSerde(StringSerde(), JsonSerde()))
        app.remote_table("b", read=read)
    with pytest.raises(PlanError, match="already a remote table"):
        app.table("a", serde=KVSerde(StringSerde(), JsonSerde()))


def test_a_join_needs_a_read_and_a_send_to_needs_a_write_when_planning() -> None:
    async def read(k: Any) -> Any:
        return None

    async def write(k: Any, v: Any) -> None:
        pass

    mem = MemorySystem()
    app = StreamApplication("remote-plan-checks")
    writes_only = app.remote_table("w", write=write)
    app.input(mem.input("in")).join_table(writes_only, combine=lambda m, r: m,
                                          name="j").sink(print)
    with pytest.raises(PlanError, match="'remote-plan-checks-1-join_table-j' joins remote table "
                                        "'w', which has no read function"):
        app.plan()
    app = StreamApplication("remote-plan-checks")
    reads_only = app.remote_table("r", read=read)
    app.input(mem.input("in")).map(lambda m: KV(m, m)).send_to(reads_only)
    with pytest.raises(PlanError, match="sends to remote table 'r', which has no write"):
        app.plan()


def test_the_plan_shows_remote_tables_in_json_dot_svg_and_html(service: KVService) -> None:
    import json

    app, _ = join_app(HttpKV(service.url), rate_limit=100, retry=FAST_RETRY,
                      cache=CacheSpec(ttl=60, size=1000, write="around"))
    plan = app.plan()
    d = json.loads(plan.to_json())
    assert d["remote_tables"]["names"]["rate_limit"] == 100.0
    assert d["remote_tables"]["names"]["cache"] == {"ttl_s": 60.0, "size": 1000,
                                                     "write": "around"}
    assert d["operators"]["remote-join-1-join_table-names"]["lookups"] == ["table:names"]
    summary = "read/write, rate 100/s, retry x3, cache 1000 keys 60s write-around"
    assert summary in plan.to_dot() and "remote table names" in plan.to_dot()
    assert "remote table names" in plan.to_svg()
    assert summary in plan.to_html() and "Remote tables" in plan.to_html()
    assert summary in plan.explain()
    assert plan.graph.nodes["table:names"]["remote"] is True


def test_spark_refuses_remote_tables_when_planning(service: KVService) -> None:
    from runtime.spark import SparkRunner

    app, _ = join_app(HttpKV(service.url))
    with pytest.raises(PlanError, match="SparkRunner cannot run .*remote table.*names"):
        SparkRunner().reprocess(app, {"ids": ["u1"]})


def test_remote_calls_retries_and_cache_hits_are_store_metrics(service: KVService) -> None:
    service.fail("u2", times=1)
    app, _ = join_app(HttpKV(service.url), retry=FAST_RETRY, cache=CacheSpec(ttl=60, size=10))
    _, _, container = memory_job(app, {"ids": {0: ["u1", "u2", "u1", "u1"]}}, {}, {})
    run_container(container, timeout=10)
    got = {name: value for group, name, labels, value in container.samples()
           if group == "store" and labels == {"task": "Partition 0", "store": "names"}}
    assert got == {"remote-calls": 3, "remote-retries": 1, "remote-failures": 0,
                   "remote-cache-hits": 2, "remote-cache-misses": 2}


def test_with_a_thread_pool_the_join_stays_on_the_loop_and_threads_get_a_clear_error(
        service: KVService) -> None:
    kv = HttpKV(service.url)
    config = {"job.container.thread.pool.size": 2, "task.max.concurrency": 4}
    app, ids = join_app(kv, config=config)
    assert sorted(TestRunner(app).add_input(ids, ["u1", "u2"]).run().messages("out")) == [
        ("u1", "Ada"), ("u2", "Bob")]

    mem = MemorySystem()
    app = StreamApplication("remote-threads", config=config)
    app.remote_table("names", write=kv.write)

    words = mem.input("words")  # the map runs on a pool thread: no event loop there
    app.input(words).map(PutUnawaited(lambda k: (k, "x")), name="put").send_to(app.output(mem.output("out")))
    with pytest.raises(TaskError, match="outside the task's event loop") as err:
        TestRunner(app).add_input(words, ["a"]).run()
    assert "remote-threads-1-map-put" in str(err.value)


def test_a_put_made_for_no_message_completes_before_the_commit(service: KVService) -> None:
    """A window's panes come out at end-of-stream (no message of their own): the puts their
    sink starts are waited for by the task's last commit."""
    from datetime import timedelta

    from samza_dsl import Windows

    kv = HttpKV(service.url)
    service.slow("w", 0.3)
    mem = MemorySystem()
    app = StreamApplication("remote-loose")
    app.remote_table("names", write=kv.write)

    words = mem.input("words")
    app.input(words).window(Windows.keyed_tumbling(lambda w: w, timedelta(hours=1),
                                                   init=lambda: 0, fold=lambda w, n: n + 1),
                            name="count").sink(
        PutUnawaited(lambda pane: (pane.key.key, pane.message)), name="put")
    checkpoints = MemoryCheckpoints()
    _, _, container = memory_job(app, {"words": {0: ["w", "v", "w"]}}, {}, {},
                                 checkpoints=checkpoints)
    run_container(container, timeout=10)
    assert service.data["w"] == 2 and service.data["v"] == 1
    assert checkpoints.checkpoints["Partition 0"][SSP("words", 0)] == 2


def test_writes_of_one_turn_go_out_as_one_batch_and_get_all_uses_read_all(
        service: KVService) -> None:
    service.latency = 0.02
    kv = HttpKV(service.url)
    mem = MemorySystem()
    app = StreamApplication("remote-batch-write", config={"task.max.concurrency": 30})
    names = app.remote_table("names", read_all=kv.read_all, write_all=kv.write_all)
    updates = mem.input("updates")
    app.input(updates).map(lambda i: KV(f"n{i}", i)).send_to(names)
    TestRunner(app).add_input(updates, list(range(30))).run()
    assert {k: v for k, v in service.data.items() if k.startswith("n")} == {
        f"n{i}": i for i in range(30)}
    puts = [keys for _, method, keys in service.log if method == "POST" and keys[0][0] == "n"]
    assert sum(len(p) for p in puts) == 30 and len(puts) < 10

    app = StreamApplication("remote-get-all")
    app.remote_table("names", read_all=kv.read_all)

    class GetAll:
        def init(self, ctx: Any) -> None:
            self.t = ctx.table("names")

        async def __call__(self, keys: list[str]) -> list[Any]:
            return [await self.t.get_all(keys)]

    asks = mem.input("asks")
    app.input(asks).async_flat_map(GetAll()).send_to(app.output(mem.output("out")))
    before = len(service.log)
    out = TestRunner(app).add_input(asks, [["u1", "n3", "zz"]]).run().messages("out")
    assert out == [{"u1": "Ada", "n3": 3}]
    assert len(service.log) == before + 1  # one read_all
