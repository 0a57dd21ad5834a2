"""Benchmark workloads W1-W4 (see BENCHMARKS.md), each run against its baseline in the same
process, in the same run. In-memory streams; the table of W1 is an in-memory store."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta
from typing import Any

import msgspec

from benchmarks.common import emit, timed
from benchmarks.peers.workload import w1_messages, w1_plain_loop, w2_bare_asyncio
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import BytesSerde, KVSerde, StringSerde
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
    app.table("counts", serde=KVSerde(StringSerde(), BytesSerde()))
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


def run_w3(n: int) -> dict[str, Any]:
    parts = w3_input(n)
    base_s, expected = timed(lambda: w3_baseline(parts))
    app, inp, out = w3_app()
    secs, result = timed(lambda: TestRunner(app).add_input(inp, parts).run(timeout=600))
    panes = result.messages(out)
    total = sum(c for _, _, c in panes)
    assert total >= n, f"W3 counted {total} of {n} views"
    return emit("W3", {"messages": n, "partitions": 4, "window_s": 10}, n, secs,
                "plain-python-loop", n / base_s, panes=len(panes), expected_panes=len(expected))


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


def run_w4(n: int) -> dict[str, Any]:
    impressions, clicks = w4_input(n)
    base_s, expected = timed(lambda: w4_baseline(impressions, clicks))
    app, imp, clk, out = w4_app()
    secs, result = timed(lambda: TestRunner(app).add_input(imp, impressions)
                         .add_input(clk, clicks).run(timeout=600))
    joined = len(result.messages(out))
    assert joined == n, f"W4 joined {joined} of {n}"
    return emit("W4", {"messages": 2 * n, "ttl_min": 10}, 2 * n, secs, "plain-python-dict-join",
                2 * n / base_s, joined=joined, baseline_joined=expected)
