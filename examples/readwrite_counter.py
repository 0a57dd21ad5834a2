"""The Samza paper's ReadWrite counter (benchmark W1) on the embedded local system.

Each event ``KV(id, {"id": ..., "pad": ...})`` reads its id's count from the ``counts`` table,
adds one, writes it back and emits ``KV(id, count)``. The table is an LMDB store per task with a
changelog, so counts survive restarts, crashes and a lost local store.

    samza-dsl run examples/readwrite_counter.py:app --sample 100000
    samza-dsl dump examples/readwrite_counter.py:app counts --limit 5

>>> inputs = sample_input(3, ids=10)
>>> inputs["events"][0]
KV(key='3', value={'id': 3, 'pad': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'})
"""

from __future__ import annotations

import random
from typing import Any

from samza_dsl import KV, Context, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "CountInTable", "sample_input"]


class CountInTable:
    """Read the id's count from the table, add 1, write it back, emit ``KV(id, count)``."""

    def init(self, ctx: Context) -> None:
        self.table = ctx.table("counts")

    def __call__(self, event: KV[str, dict[str, Any]]) -> KV[str, int]:
        table = self.table
        count = (table.get(event.key) or 0) + 1
        table.put(event.key, count)
        return KV(event.key, count)


app = StreamApplication("readwrite-counter", config={"task.commit.ms": 1000})
local = LocalSystem("local")
events = app.input(local.input("events", serde=KVSerde(StringSerde(), JsonSerde()), partitions=4))
counts = app.output(local.output("counts", serde=KVSerde(StringSerde(), JsonSerde()),
                                 partitions=4))
app.table("counts", serde=KVSerde(StringSerde(), JsonSerde()))
events.map(CountInTable(), name="count").send_to(counts)


def sample_input(n: int, ids: int = 10_000, seed: int = 1) -> dict[str, list[KV[str, Any]]]:
    """``n`` events over ``ids`` ids: ``{"events": [KV(str(id), {"id", "pad"}), ...]}``."""
    rnd = random.Random(seed)
    pad = "x" * 100
    out = []
    for _ in range(n):
        i = rnd.randint(1, ids)
        out.append(KV(str(i), {"id": i, "pad": pad}))
    return {"events": out}
