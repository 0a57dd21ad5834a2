"""A counter whose own config (``StreamApplication(config=...)``) is the JSON in the
environment variable SAMZA_PLACES_CONFIG, for tests that give one key in each place a key can be
given. SAMZA_PLACES_SYSTEM=kafka puts it on a Kafka system (planned, never run)."""

from __future__ import annotations

import json
import os
from typing import Any

from samza_dsl import KV, Context, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem, LocalSystem

KV_JSON = KVSerde(StringSerde(), JsonSerde())


class Count:
    def init(self, ctx: Context) -> None:
        self.table = ctx.table("counts")

    def __call__(self, event: KV[str, Any]) -> KV[str, int]:
        n = (self.table.get(event.key) or 0) + 1
        self.table.put(event.key, n)
        return KV(event.key, n)


def app() -> StreamApplication:
    config = json.loads(os.environ.get("SAMZA_PLACES_CONFIG") or "{}")
    built = StreamApplication("places", config=config)
    if os.environ.get("SAMZA_PLACES_SYSTEM") == "kafka":
        system: Any = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9")
    else:
        system = LocalSystem("local")
    events = built.input(system.input("events", serde=KV_JSON, partitions=2))
    out = built.output(system.output("totals", serde=KV_JSON, partitions=2))
    built.table("counts", serde=KV_JSON)
    events.map(Count(), name="count").send_to(out)
    return built
