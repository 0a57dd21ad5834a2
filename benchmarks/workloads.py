"""Benchmark workloads W1-W4 (see docs/benchmarks.md), each run against its baseline in the same
process, in the same run. In-memory streams; the table of W1 is an in-memory store."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import timedelta
from typing import Any

import msgspec

from benchmarks.common import emit, timed
from benchmarks.peers.workload import w1_messages, w1_plain_loop, w2_bare_asyncio
from operators.hashing import partition_for
from runtime.engine.serde_util import default_key_bytes
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import BytesSerde, JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


# -- W1: ReadWrite counter --------------------------------------------------------------------

def w1_input(n: int, partitions: int = 4, seed: int = 1) -> dict[int, list[KV[str, bytes]]]:
    return {p: [KV(k, v) for k, v in msgs]
            for p, msgs in w1_messages(n, partitions, seed).items()}


class CountInTable:
    """Read the id's count from the table, add 1, write it back."""

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("counts")

    def __call__(self, kv: KV[str, bytes]) -> KV[int, bytes]:
        i = _dec.decode(kv.value)["id"]
        table = self.table
        count = (table.get(i) or 0) + 1
        table.put(i, count)
        return KV(i, _enc.encode(count))


def w1_app() -> tuple[StreamApplication, Any, Any]:
    app = StreamApplication("w1-readwrite")
    mem = MemorySystem()
    inp = mem.input("events", serde=KVSerde(StringSerde(), BytesSerde()), partitions=4)
    out = mem.output("counts-out", partitions=4)
    # CountInTable keeps int counts under int ids: the serde that encodes them, in TestRunner's
    # store as in a job's
    app.table("counts", serde=KVSerde(JsonSerde(), JsonSerde()))
    app.input(inp).map(CountInTable(), name="count").send_to(app.output(out))
    return app, inp, out


def w1_baseline(parts: dict[int, list[KV[str, bytes]]]) -> int:
    return w1_plain_loop(parts)


def run_w1(n: int) -> dict[str, Any]:
    parts = w1_input(n)
    base_s, _ = timed(lambda: w1_baseline(parts))
    app, inp, out = w1_app()
    secs, result = timed(lambda: TestRunner(app).add_input(inp, parts).run(timeout=600))
    assert len(result.messages(out)) == n
    return emit("W1", {"messages": n, "partitions": 4, "store": "memory"}, n, secs,
                "plain-python-loop", n / base_s)


# -- W2: async enrichment -----------------------------------------------------------------------

async def _enrich(m: int) -> list[int]:
    await asyncio.sleep(0.005)
    return [m]


def w2_app(c: int) -> tuple[StreamApplication, Any, Any]:
    app = StreamApplication("w2-async", config={"task.max.concurrency": c})
    mem = MemorySystem()
    inp = mem.input("requests", partitions=1)
    out = mem.output("enriched", partitions=1)
    app.input(inp).async_flat_map(_enrich, name="enrich").send_to(app.output(out))
    return app, inp, out


def w2_bare(n: int, c: int) -> float:
    return w2_bare_asyncio(n, c)


def w2_ceiling(n: int, c: int) -> float:
    """The best asyncio does here: c long-lived coroutines sleeping back to back (no per-message
    Task). epoll rounds timeouts up to whole ms, so even this stays under the c/0.005 limit."""
    async def worker(count: int) -> None:
        for _ in range(count):
            await asyncio.sleep(0.005)

    async def main() -> None:
        await asyncio.gather(*(worker(n // c + (1 if i < n % c else 0)) for i in range(c)))
    secs, _ = timed(lambda: asyncio.run(main()))
    return secs


def run_w2(n: int, c: int) -> dict[str, Any]:
    app, inp, out = w2_app(c)
    secs, result = timed(lambda: TestRunner(app).add_input(inp, list(range(n))).run(timeout=600))
    assert len(result.messages(out)) == n
    bare = w2_bare(n, c)
    ceiling = w2_ceiling(n, c)
    limit = c / 0.005
    return emit("W2", {"messages": n, "concurrency": c}, n, secs, "limit c/0.005", limit,
                bare_asyncio_msgs_per_s=round(n / bare, 1),
                ratio_to_bare=round(bare / secs, 3),
                asyncio_ceiling_msgs_per_s=round(n / ceiling, 1),
                ratio_to_ceiling=round(ceiling / secs, 3))


# -- W3: repartitioned event-time window ----------------------------------------------------------

COUNTRIES = [f"c{i:02d}" for i in range(40)]


def w3_input(n: int, partitions: int = 4, seed: int = 3) -> dict[int, list[dict[str, Any]]]:
    rnd = random.Random(seed)
    parts: dict[int, list[dict[str, Any]]] = {p: [] for p in range(partitions)}
    ts = 1_700_000_000.0
    for i in range(n):
        ts += rnd.random() * 0.01
        view = {"user": f"u{rnd.randint(1, 100_000)}", "country": rnd.choice(COUNTRIES),
                "ts": round(ts, 3)}
        parts[i % partitions].append(view)
    return parts


def w3_app() -> tuple[StreamApplication, Any, Any]:
    app = StreamApplication("w3-window")
    mem = MemorySystem()
    # watermarks come from the input's event time, min over the producing tasks
    inp = mem.input("page-views", partitions=4, event_time=lambda v: v["ts"])
    out = mem.output("views-per-country")
    (app.input(inp)
        .partition_by(lambda v: v["country"], name="by-country")
        .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
                                       init=lambda: 0, fold=lambda kv, n: n + 1,
                                       event_time=lambda kv: kv.value["ts"]), name="count")
        .map(lambda pane: (pane.key.key, pane.key.pane_id, pane.message))
        .send_to(app.output(out)))
    return app, inp, out


def w3_baseline(parts: dict[int, list[dict[str, Any]]]) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = {}
    for msgs in parts.values():
        for v in msgs:
            ms = int(v["ts"] * 1000)
            key = (v["country"], ms - ms % 10_000)
            counts[key] = counts.get(key, 0) + 1
    return counts


def w3_floor(parts: dict[int, list[dict[str, Any]]], chunk: int = 4096) -> dict[Any, int]:
    """The least work W3's semantics ask of each view, as plain loops with no runtime, a chunk of
    each input partition at a time (the order kindest to the cache): the input's event time,
    the ``partition_by`` key, a ``KV(key, view)`` in the key's partition (murmur2, once per key),
    then per partition the window's event time, its pane, its key and the fold. No watermarks,
    no pane closing, no outputs. Returns the counts by (pane start, key)."""
    input_time, by = (lambda v: v["ts"]), (lambda v: v["country"])
    window_key, window_time = (lambda kv: kv.key), (lambda kv: kv.value["ts"])

    def fold(kv: Any, n: int) -> int:
        return n + 1

    partition_of: dict[Any, int] = {}
    counts: dict[Any, int] = {}
    buckets: list[list[KV[Any, Any]]] = [[] for _ in range(4)]
    for msgs in parts.values():
        for lo in range(0, len(msgs), chunk):
            for v in msgs[lo:lo + chunk]:
                input_time(v)
                k = by(v)
                p = partition_of.get(k)
                if p is None:
                    p = partition_of[k] = partition_for(default_key_bytes(k), 4)
                buckets[p].append(KV(k, v))
            for bucket in buckets:
                for kv in bucket:
                    ms = round(window_time(kv) * 1000.0)
                    pane = (ms - ms % 10_000, window_key(kv))
                    counts[pane] = fold(kv, counts.get(pane, 0))
                bucket.clear()
    return counts


def run_w3(n: int) -> dict[str, Any]:
    parts = w3_input(n)
    base_s, expected = timed(lambda: w3_baseline(parts))
    floor_s, floor_counts = timed(lambda: w3_floor(parts))
    assert sum(floor_counts.values()) == n and len(floor_counts) == len(expected)
    app, inp, out = w3_app()
    secs, result = timed(lambda: TestRunner(app).add_input(inp, parts).run(timeout=600))
    panes = result.messages(out)
    total = sum(c for _, _, c in panes)
    assert total >= n, f"W3 counted {total} of {n} views"
    return emit("W3", {"messages": n, "partitions": 4, "window_s": 10}, n, secs,
                "plain-python-loop", n / base_s, panes=len(panes), expected_panes=len(expected),
                floor_msgs_per_s=round(n / floor_s, 1), floor_ratio=round(base_s / floor_s, 3),
                of_floor=round(floor_s / secs, 3))


# -- W4: stream-stream join ------------------------------------------------------------------------

def w4_input(n: int, seed: int = 4) -> tuple[list[KV[int, dict[str, Any]]], list[KV[int, dict[str, Any]]]]:
    rnd = random.Random(seed)
    ids = list(range(n))
    impressions = [KV(i, {"ad": i % 97, "kind": "impression"}) for i in ids]
    rnd.shuffle(ids)
    clicks = [KV(i, {"kind": "click"}) for i in ids]
    return impressions, clicks


def w4_app() -> tuple[StreamApplication, Any, Any, Any]:
    app = StreamApplication("w4-join")
    mem = MemorySystem()
    imp = mem.input("impressions", partitions=1)
    clk = mem.input("clicks", partitions=1)
    out = mem.output("joined")
    (app.input(imp).join(app.input(clk), key=lambda kv: kv.key, other_key=lambda kv: kv.key,
                         combine=lambda a, b: KV(a.key, (a.value["ad"], b.value["kind"])),
                         ttl=timedelta(minutes=10), name="imp-click")
        .send_to(app.output(out)))
    return app, imp, clk, out


def w4_baseline(impressions: list[Any], clicks: list[Any]) -> int:
    left: dict[Any, Any] = {}
    right: dict[Any, Any] = {}
    out = []
    for a, b in zip(impressions, clicks, strict=True):
        left[a.key] = a
        r = right.get(a.key)
        if r is not None:
            out.append((a.value["ad"], r.value["kind"]))
        right[b.key] = b
        lft = left.get(b.key)
        if lft is not None:
            out.append((lft.value["ad"], b.value["kind"]))
    return len(out)


def w4_floor(impressions: list[Any], clicks: list[Any], ttl_ms: int = 600_000) -> int:
    """The least work W4's semantics ask of each message, as one plain loop with no runtime:
    the processing time in ms, the message's join key, its entry with that time on its side,
    the other side's entry for the key if it is within the TTL, and the join's combine. No
    expiry sweep, no outputs sent. Returns how many it joined."""
    key, other_key = (lambda kv: kv.key), (lambda kv: kv.key)

    def combine(a: Any, b: Any) -> Any:
        return KV(a.key, (a.value["ad"], b.value["kind"]))

    left: dict[Any, Any] = {}
    right: dict[Any, Any] = {}
    out = []
    ns = time.time_ns
    for a, b in zip(impressions, clicks, strict=True):
        now = ns() // 1_000_000
        k = key(a)
        left[k] = (a, now)
        r = right.get(k)
        if r is not None and now - r[1] <= ttl_ms:
            out.append(combine(a, r[0]))
        now = ns() // 1_000_000
        k = other_key(b)
        right[k] = (b, now)
        lft = left.get(k)
        if lft is not None and now - lft[1] <= ttl_ms:
            out.append(combine(lft[0], b))
    return len(out)


def run_w4(n: int) -> dict[str, Any]:
    impressions, clicks = w4_input(n)
    base_s, expected = timed(lambda: w4_baseline(impressions, clicks))
    floor_s, floor_joined = timed(lambda: w4_floor(impressions, clicks))
    assert floor_joined == expected, f"W4's floor joined {floor_joined} of {expected}"
    app, imp, clk, out = w4_app()
    secs, result = timed(lambda: TestRunner(app).add_input(imp, impressions)
                         .add_input(clk, clicks).run(timeout=600))
    joined = len(result.messages(out))
    assert joined == n, f"W4 joined {joined} of {n}"
    return emit("W4", {"messages": 2 * n, "ttl_min": 10}, 2 * n, secs, "plain-python-dict-join",
                2 * n / base_s, joined=joined, baseline_joined=expected,
                floor_msgs_per_s=round(2 * n / floor_s, 1), floor_ratio=round(base_s / floor_s, 3),
                of_floor=round(floor_s / secs, 3))
