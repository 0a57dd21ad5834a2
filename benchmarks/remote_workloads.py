"""W10 (docs/benchmarks.md): a join against a remote table served over HTTP on 127.0.0.1 with 5 ms
latency, at ``task.max.concurrency`` 100, against its limit ``concurrency / latency``; and the
same join when the table's cache answers, against the remote path and a plain dict lookup.

The service (``samza_dsl.testing.kv_service``) runs in a process of its own, so its work does not
share the job's interpreter; its 5 ms are a thread's sleep, not an asyncio timer (which epoll
rounds up to whole milliseconds). The job runs in memory (``TestRunner``), one partition.

- ``remote``: 20,000 messages over 20,000 distinct keys, no cache: every message waits for the
  service. The reads go out batched, as one ``read_all`` of an eighth of the messages in flight
  (12 keys at concurrency 100: ``runtime.state.remote.OVERLAP``), so several batches are on
  their way at once and the service sees about 1,500 requests a second, not 20,000.
- ``remote, unbatched``: the same with ``read`` only: one HTTP request per message (for
  reference; the client's and the service's per-request cost bounds it on two cores).
- ``cache hits``: messages over 100 keys with a cache: after the first 100 misses, every lookup
  is a hit and completes inline.

Each figure is the run's messages over its wall time (planning and start-up included), and the
steady-state rate between the first and the last join (``steady_msgs_per_s``). Since each
message waits for a whole round trip to the service, the same run also measures that round trip
(one key at a time): ``c / round trip`` is the practical limit on a busy machine, where the
service's 5 ms come out longer; and a hand-written asyncio client that keeps the same 100 keys in
flight in the same batches, with no stream processing around it (``bare_client``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import time
from typing import Any

from benchmarks.common import emit, timed
from runtime.state.remote import OVERLAP
from runtime.testing import TestRunner
from samza_dsl import KV, CacheSpec, StreamApplication
from samza_dsl.systems import MemorySystem
from samza_dsl.testing.kv_service import HttpKV, KVService

LATENCY = 0.005


def batch_keys(c: int) -> int:
    """The keys of one ``read_all`` the job sends at concurrency ``c`` (the table's default
    ``batch_size`` and the runtime's ``OVERLAP``)."""
    return max(1, c // OVERLAP)


def _serve(data: dict[str, Any], latency: float, conn: Any) -> None:
    with KVService(data, latency=latency) as service:
        conn.send(service.url)
        conn.recv()  # until told to stop


class ServiceProcess:
    """A ``KVService`` in a forked process: ``url`` while in ``with``."""

    def __init__(self, data: dict[str, Any], latency: float) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(data, latency, child), daemon=True)
        self.url = ""

    def __enter__(self) -> ServiceProcess:
        self._proc.start()
        self.url = self._conn.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        self._proc.join(10)


class Stamped:
    """The join's ``combine``: ``(key, value)``, timing the first and the last join."""

    def __init__(self) -> None:
        self.first = 0.0
        self.last = 0.0

    def __call__(self, m: KV[str, None], r: KV[str, Any] | None) -> tuple[str, Any]:
        now = time.perf_counter()
        if not self.first:
            self.first = now
        self.last = now
        return m.key, r.value if r is not None else None


def w10_app(url: str, c: int, *, batched: bool, cache: bool) -> tuple[StreamApplication, Any,
                                                                        Stamped]:
    kv = HttpKV(url)
    app = StreamApplication("w10-remote-join", config={"task.max.concurrency": c})
    mem = MemorySystem()
    inp = mem.input("requests", partitions=1)
    table = app.remote_table(
        "profiles", read=None if batched else kv.read, read_all=kv.read_all if batched else None,
        cache=CacheSpec(ttl=3600, size=100_000) if cache else None)
    stamps = Stamped()
    (app.input(inp).join_table(table, combine=stamps, name="profile")
        .send_to(app.output(mem.output("enriched", partitions=1))))
    return app, inp, stamps


def _run(url: str, keys: list[str], c: int, *, batched: bool, cache: bool
         ) -> tuple[float, float, float]:
    """(seconds, steady msgs/s, CPU µs of the job's process per message)."""
    app, inp, stamps = w10_app(url, c, batched=batched, cache=cache)
    messages = [KV(k, None) for k in keys]
    cpu = time.process_time()
    secs, result = timed(lambda: TestRunner(app).add_input(inp, messages).run(timeout=600))
    cpu = time.process_time() - cpu
    out = result.messages("enriched")
    assert len(out) == len(keys) and all(v is not None for _, v in out), "lost or missed joins"
    steady = (len(keys) - 1) / (stamps.last - stamps.first)
    return secs, steady, cpu / len(keys) * 1e6


def round_trip(url: str, c: int, n: int = 100) -> float:
    """The median seconds of one ``read_all`` of a batch of keys, one at a time: what each
    message waits at least, on this machine now."""
    kv = HttpKV(url)
    keys = [f"k{i}" for i in range(batch_keys(c))]

    async def main() -> float:
        times = []
        for _ in range(n):
            t = time.perf_counter()
            await kv.read_all(keys)
            times.append(time.perf_counter() - t)
        await kv.aclose()
        return statistics.median(times)

    return asyncio.run(main())


def bare_client(url: str, n: int, c: int) -> float:
    """Seconds for a hand-written asyncio client to look ``n`` keys up, ``c`` in flight in
    batches of ``batch_keys(c)`` (``c`` over that many workers, each sending its next batch as soon as the last
    one is back): the same service and client with no stream processing around them."""
    kv = HttpKV(url)
    keys = [f"k{i}" for i in range(n)]

    async def main() -> None:
        size = batch_keys(c)
        chunks = iter(range(0, n, size))

        async def worker() -> None:
            for i in chunks:
                got = await kv.read_all(keys[i:i + size])
                assert len(got) == len(keys[i:i + size])

        await asyncio.gather(*(worker() for _ in range(max(1, c // size))))
        await kv.aclose()

    secs, _ = timed(lambda: asyncio.run(main()))
    return secs


def run_w10(n: int, c: int = 100, cache_n: int | None = None) -> list[dict[str, Any]]:
    """W10 at concurrency ``c``: n messages on the remote path, ``cache_n`` (default 10 n) on
    the cache-hit path. Returns the JSON lines printed."""
    cache_n = cache_n or 10 * n
    data = {f"k{i}": {"tier": i % 3} for i in range(max(n, 100))}
    limit = c / LATENCY
    lines = []
    with ServiceProcess(data, LATENCY) as service:
        _run(service.url, [f"k{i}" for i in range(200)], c, batched=True, cache=False)  # warm-up
        rtt = round_trip(service.url, c)
        practical = c / rtt
        bare = n / bare_client(service.url, n, c)
        distinct = [f"k{i}" for i in range(n)]
        secs, steady, cpu = _run(service.url, distinct, c, batched=True, cache=False)
        remote_rate = n / secs
        lines.append(emit("W10", {"messages": n, "concurrency": c, "latency_ms": 5,
                                  "path": "remote, batched"}, n, secs, "limit c/latency", limit,
                          steady_msgs_per_s=round(steady, 1),
                          steady_ratio=round(steady / limit, 3),
                          service_round_trip_ms=round(rtt * 1000, 3),
                          ratio_to_round_trip_limit=round(remote_rate / practical, 3),
                          bare_client_msgs_per_s=round(bare, 1),
                          ratio_to_bare_client=round(remote_rate / bare, 3),
                          cpu_us_per_msg=round(cpu, 1)))
        m = max(1, n // 4)
        secs_u, steady_u, cpu_u = _run(service.url, distinct[:m], c, batched=False, cache=False)
        lines.append(emit("W10", {"messages": m, "concurrency": c, "latency_ms": 5,
                                  "path": "remote, unbatched"}, m, secs_u, "limit c/latency",
                          limit, steady_msgs_per_s=round(steady_u, 1),
                          steady_ratio=round(steady_u / limit, 3), cpu_us_per_msg=round(cpu_u, 1)))
        hot = [f"k{i % 100}" for i in range(cache_n)]
        secs_h, steady_h, cpu_h = _run(service.url, hot, c, batched=True, cache=True)
    hit_rate = cache_n / secs_h
    table = {k: data[k] for k in hot[:100]}
    base_s, _ = timed(lambda: [(k, table.get(k)) for k in hot])
    lines.append(emit("W10", {"messages": cache_n, "concurrency": c, "path": "cache hits"},
                      cache_n, secs_h, "dict lookup loop", cache_n / base_s,
                      steady_msgs_per_s=round(steady_h, 1),
                      speedup_over_remote=round(hit_rate / remote_rate, 1),
                      cpu_us_per_msg=round(cpu_h, 1),
                      steady_speedup_over_remote=round(steady_h / steady, 1)))
    return lines
