"""A table with an event-time ttl on Spark: a lookup misses an entry the table's clock has
passed, as on every other runner (tests/runtime/test_table_ttl.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runtime.spark import SparkRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

KVS = KVSerde(StringSerde(), JsonSerde())


def _app() -> StreamApplication:
    app, mem = StreamApplication("ttl-enrich"), MemorySystem()
    profiles = mem.input("profiles", serde=KVS, partitions=1, event_time=lambda m: m.value["ts"])
    clicks = mem.input("clicks", serde=KVS, partitions=1, event_time=lambda m: m.value["ts"])
    table = app.table("profile", serde=KVS, ttl=timedelta(seconds=60),
                      ttl_event_time=lambda v: v["ts"])
    app.input(profiles).send_to(table)
    (app.input(clicks).join_table(table, combine=lambda m, rec: KV(
        m.key, [m.value["ts"], rec.value["ts"] if rec else None]), name="with-profile")
     .send_to(app.output(mem.output("enriched", serde=KVS))))
    return app


PROFILES = [KV("u0", {"ts": 100.0}), KV("u1", {"ts": 200.0})]
CLICKS = [KV("u0", {"ts": 150.0}), KV("u0", {"ts": 250.0}), KV("u1", {"ts": 250.0})]
# u0's profile (100 s) has expired once u1's (200 s) is written: 100 + 60 <= 200
WANT = [("u0", [150.0, 100.0]), ("u0", [250.0, None]), ("u1", [250.0, 200.0])]


def test_event_time_ttl_on_spark(spark: Any) -> None:
    out = SparkRunner(spark).reprocess(_app(), {"profiles": PROFILES, "clicks": CLICKS})
    got = sorted((m.key, m.value) for m in out.messages("enriched"))
    assert got == WANT
