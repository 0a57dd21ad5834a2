"""Early panes where the order messages reach a window depends on speed (an async step before it,
whose calls complete in any order): what the rules fix, whatever that order (SEMANTICS.md rules
7 and 8).

- A tumbling window adds each message to its pane as it comes: the number of EARLY panes of each
  pane and the number of messages in each are fixed by the input (a count trigger counts
  messages, and no in-order message is late), and so is every message's pane; which messages an
  EARLY pane holds follows their arrival order.
- A session window takes its messages in event-time order below the watermark there, so with
  distinct event times per key its EARLY panes are fixed too."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import timedelta
from typing import Any

from runtime import TestRunner
from samza_dsl import KV, AccumulationMode, StreamApplication, Triggers, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

SERDE = KVSerde(StringSerde(), JsonSerde())
SEEDS = range(4)


def et(kv: KV[str, Any]) -> float:
    return float(kv.value["t"])


def build(seed: int, kind: str) -> StreamApplication:
    rng = random.Random(seed)
    mem = MemorySystem()
    app = StreamApplication("early", config={"task.max.concurrency": 50})
    s = app.input(mem.input("in", serde=SERDE, partitions=1))

    async def jitter(kv: KV[str, Any]) -> list[KV[str, Any]]:
        await asyncio.sleep(rng.random() * 0.004)
        return [kv]

    if kind == "tumbling":
        w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), event_time=et)
    else:
        w = Windows.keyed_session(lambda kv: kv.key, timedelta(seconds=5), event_time=et)
    w = w.early_trigger(Triggers.repeat(Triggers.count(2))) \
        .accumulation(AccumulationMode.DISCARDING)
    (s.async_flat_map(jitter, name="jitter").window(w, name="w")
     .map(lambda p: [p.key.key, p.key.pane_id, p.firing.name, [kv.value["t"] for kv in p.message]],
          name="row")
     .send_to(app.output(mem.output("out", serde=JsonSerde(), partitions=1))))
    return app


DATA = {0: [KV(f"k{i % 2}", {"t": i * 1.0}) for i in range(30)]}  # in order, distinct times


def panes(seed: int, kind: str) -> list[list[Any]]:
    result = TestRunner(build(seed, kind)).add_input("in", DATA).run(timeout=60)
    assert result.late() == 0
    return result.messages("out")


def test_a_tumbling_window_fixes_how_many_early_panes_and_their_sizes() -> None:
    runs = [panes(seed, "tumbling") for seed in SEEDS]
    sizes = [Counter((k, p, f, len(m)) for k, p, f, m in run) for run in runs]
    assert all(s == sizes[0] for s in sizes)
    # each pane's messages, over its EARLY and DEFAULT panes (DISCARDING), exactly once
    for run in runs:
        union: dict[tuple[str, str], list[float]] = {}
        for k, p, _f, m in run:
            union.setdefault((k, p), []).extend(m)
        assert {kp: sorted(m) for kp, m in union.items()} == {
            (f"k{j}", str(s * 10000)): [float(i) for i in range(30)
                                        if i % 2 == j and s * 10 <= i < s * 10 + 10]
            for j in range(2) for s in range(3)}


def test_a_session_window_fixes_its_early_panes() -> None:
    runs = [sorted(panes(seed, "session"), key=repr) for seed in SEEDS]
    assert all(r == runs[0] for r in runs)
    # in event-time order: each EARLY pane holds the next two messages of its key
    early = [m for _k, _p, f, m in runs[0] if f == "EARLY"]
    assert len(early) == 14 and all(m == [m[0], m[0] + 2.0] for m in early)
