"""The proof job of exactly once on the local system (``test_exactly_once.py``). Its input
``events`` holds ``KV(key, {"p": partition, "o": offset})``: each message carries where it is.

- ``seen``: one output per input, ``KV(key, [partition, offset])``;
- ``counts``: the input repartitioned by key through an intermediate stream, then each key's
  running count in the table ``counts`` (an LMDB store with a changelog), ``KV(key, count)``.

``user.eos.sleep.ms`` makes ``seen`` sleep that long every 100 messages, so that a run lasts
long enough to be killed while it processes.
"""

from __future__ import annotations

import time
from typing import Any

from samza_dsl import KV, Context, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "PARTITIONS"]

PARTITIONS = 4


class Seen:
    """``KV(key, [partition, offset])`` of the input message."""

    def init(self, ctx: Context) -> None:
        self.pause = float(ctx.config.get("user.eos.sleep.ms", 0)) / 1000.0
        self.n = 0

    def __call__(self, event: KV[str, dict[str, Any]]) -> KV[str, list[int]]:
        self.n += 1
        if self.pause and self.n % 100 == 0:
            time.sleep(self.pause)
        return KV(event.key, [event.value["p"], event.value["o"]])


class Count:
    """The key's running count, kept in the table ``counts``."""

    def init(self, ctx: Context) -> None:
        self.table = ctx.table("counts")

    def __call__(self, event: KV[str, Any]) -> KV[str, int]:
        count = (self.table.get(event.key) or 0) + 1
        self.table.put(event.key, count)
        return KV(event.key, count)


def key_of(event: KV[str, Any]) -> str:
    return event.key


serde = KVSerde(StringSerde(), JsonSerde())
app = StreamApplication("eos-proof", config={"task.commit.ms": 25})
local = LocalSystem("local")
events = app.input(local.input("events", serde=serde, partitions=PARTITIONS))
seen = app.output(local.output("seen", serde=serde, partitions=PARTITIONS))
counts = app.output(local.output("counts", serde=serde, partitions=PARTITIONS))
app.table("counts", serde=serde)
events.map(Seen(), name="seen").send_to(seen)
events.partition_by(key_of, name="by-key").map(Count(), name="count").send_to(counts)
