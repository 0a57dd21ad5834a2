"""Time to live of a table's entries (``app.table(..., ttl=...)``, ``runtime.state.ttl``):
expired entries are gone for reads at once, deleted from the store and its changelog at a
commit, and never brought back by a restore; on TestRunner and LMDB stores."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from operators.state import decode_key, encode_key
from runtime.state.changelog import Entries
from runtime.state.lmdb_store import LmdbStore
from runtime.state.memory_store import MemoryStore
from runtime.state.ttl import attach, expire_on_restore, ttl_codec, write_time
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import PlanError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.spec import TableSpec
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

SERDE = KVSerde(StringSerde(), JsonSerde())


def _codec() -> tuple[Any, Any, Any, Any]:
    ve, vd = ttl_codec(JsonSerde().serialize, JsonSerde().deserialize)
    return encode_key, decode_key, ve, vd


def _event_spec(ttl_ms: int = 10_000) -> TableSpec:
    return TableSpec("sessions", SERDE, ttl_ms=ttl_ms, ttl_event_time=lambda v: v["ts"])


class _ListChangelog:
    """A changelog held in a list (a unit test's: the LMDB store's restore reads it)."""

    def __init__(self) -> None:
        self.entries: Entries = []

    def append(self, entries: Entries) -> None:
        self.entries.extend(entries)

    def end_offset(self) -> int:
        return len(self.entries)

    def read(self, start: int, end: int, batch: int = 1000) -> Any:
        for i in range(start, end, batch):
            yield i, self.entries[i:min(end, i + batch)]


def test_event_time_entries_expire_for_reads_at_once_and_are_purged_at_a_commit() -> None:
    ke, kd, ve, vd = _codec()
    store = MemoryStore(name="sessions", task="Partition 0", key_encode=ke, key_decode=kd,
                        value_encode=ve, value_decode=vd, cache_size=100, write_batch_size=100)
    attach(store, _event_spec())
    store.put("a", {"ts": 100})
    store.put("b", {"ts": 105})
    store.flush()
    assert store.get("a") == {"ts": 100}
    store.put("c", {"ts": 110})  # the table's clock is 110 s: "a" (100 + 10 <= 110) is gone
    assert store.get("a") is None
    assert store.get("b") == {"ts": 105}
    assert [k for k, _ in store.all()] == ["b", "c"]
    assert store.byte_store.holds(ke("a"))  # still on "disk" until the commit's sweep
    store.flush()
    assert not store.byte_store.holds(ke("a"))
    assert store.expired == 1
    # a write whose event time is already a ttl behind the clock is expired at once
    store.put("d", {"ts": 50})
    assert store.get("d") is None


def test_processing_time_is_the_default_and_reads_the_wall_clock() -> None:
    ke, kd, ve, vd = _codec()
    store = MemoryStore(name="sessions", task="Partition 0", key_encode=ke, key_decode=kd,
                        value_encode=ve, value_decode=vd, cache_size=100, write_batch_size=100)
    now = [1000.0]
    attach(store, TableSpec("sessions", SERDE, ttl_ms=5_000), wall=lambda: now[0])
    store.put("a", {"n": 1})
    store.flush()
    assert write_time(store.byte_store.get("a", ke("a")) or b"") == 1_000_000
    now[0] = 1004.9
    assert store.get("a") == {"n": 1}
    now[0] = 1005.0
    assert store.get("a") is None and list(store.all()) == []
    store.flush()
    assert store.byte_store.count() == 0


def test_lmdb_changelog_gets_tombstones_and_a_restore_never_brings_an_expired_entry_back(
        tmp_path: Any) -> None:
    ke, kd, ve, vd = _codec()
    spec = _event_spec()
    changelog = _ListChangelog()

    def open_store(path: str, checkpointed: int | None) -> LmdbStore:
        store = LmdbStore.open(path, name="sessions", task="Partition 0", key_encode=ke,
                               key_decode=kd, value_encode=ve, value_decode=vd,
                               changelog=changelog,  # type: ignore[arg-type]
                               checkpointed=checkpointed,
                               check=expire_on_restore(None, spec))
        attach(store, spec)
        return store

    store = open_store(str(tmp_path / "one"), None)
    store.put("a", {"ts": 100})
    store.flush()
    store.put("b", {"ts": 200})  # the clock is 200 s: "a" expired
    assert store.get("a") is None
    store.flush()  # the commit's sweep deletes it: a tombstone in the changelog
    assert changelog.entries[-1] == (ke("a"), None)
    assert store.lmdb.count() == 1
    store.mark_committed(changelog.end_offset())
    store.close()
    # a changelog whose expired entries got no tombstone yet (a crash before the sweep)
    changelog.entries = [(ke("x"), ve((100_000, {"ts": 100}))),
                         (ke("y"), ve((200_000, {"ts": 200}))),
                         (ke("z"), ve((150_000, {"ts": 150})))]
    other = open_store(str(tmp_path / "two"), changelog.end_offset())
    assert other.restore_info["mode"] != "local"
    assert not other.lmdb.holds(ke("z"))  # expired when replayed: replayed as a tombstone
    assert other.get("x") is None and other.get("z") is None  # x expired since
    assert [k for k, _ in other.all()] == ["y"]
    other.flush()
    assert other.lmdb.count() == 1 and changelog.entries[-1] == (ke("x"), None)
    other.close()


def test_a_restore_keeps_the_clock_of_every_write_replayed_not_only_of_those_held(
        tmp_path: Any) -> None:
    """A changelog whose expired entry got no tombstone (the member died before the sweep
    reached it: a store larger than a sweep) and whose largest write time was overwritten by a
    late write: the rebuilt store's clock is the 100 s replayed, not the 95 s of the entries
    held, so "old" (88 + 10 <= 100) stays expired, and the first commit's sweep deletes it."""
    ke, kd, ve, vd = _codec()
    spec = _event_spec()
    changelog = _ListChangelog()
    changelog.entries = [(ke("old"), ve((88_000, {"ts": 88}))),
                         (ke("clk"), ve((100_000, {"ts": 100}))),
                         (ke("clk"), ve((2_000, {"ts": 2}))),
                         (ke("live"), ve((95_000, {"ts": 95})))]
    check = expire_on_restore(None, spec)
    store = LmdbStore.open(str(tmp_path / "s"), name="sessions", task="Partition 0",
                           key_encode=ke, key_decode=kd, value_encode=ve, value_decode=vd,
                           changelog=changelog,  # type: ignore[arg-type]
                           checkpointed=changelog.end_offset(), check=check)
    attach(store, spec, restored=check)
    assert store.get("old") is None and store.get("clk") is None
    assert store.get("live") == {"ts": 95}
    assert [k for k, _ in store.all()] == ["live"]
    store.flush()
    assert not store.lmdb.holds(ke("old")) and changelog.entries[-1] == (ke("old"), None)
    store.close()


def test_the_sweep_is_bounded_and_goes_round_the_store(monkeypatch: Any) -> None:
    monkeypatch.setattr("runtime.state.ttl.SWEEP", 100)
    ke, kd, ve, vd = _codec()
    store = MemoryStore(name="sessions", task="Partition 0", key_encode=ke, key_decode=kd,
                        value_encode=ve, value_decode=vd, cache_size=10,
                        write_batch_size=1_000_000)
    attach(store, _event_spec(ttl_ms=1_000))
    n = 150
    for i in range(n):
        store.put(f"k{i:07d}", {"ts": 0})
    store.put("zz", {"ts": 10})
    store.flush()  # the first sweep reads SWEEP entries
    assert store.expired == 100
    store.flush()  # the next one goes on from there
    assert store.expired == n
    assert [k for k, _ in store.all()] == ["zz"]


def _lookup_app(ttl: timedelta, **kw: Any) -> tuple[StreamApplication, Any]:
    """Events ``{"kind": "put"|"get", "user", "ts"}`` on one partition: a put writes the
    user's entry, a get looks it up."""
    app, mem = StreamApplication("ttl"), MemorySystem()
    events = mem.input("events", partitions=1)
    table = app.table("sessions", serde=SERDE, ttl=ttl, **kw)
    s = app.input(events)
    s.filter(lambda e: e["kind"] == "put").map(lambda e: KV(e["user"], e)).send_to(table)
    (s.filter(lambda e: e["kind"] == "get").map(lambda e: KV(e["user"], e))
     .join_table(table, combine=lambda m, r: (m.value["user"], m.value["ts"],
                                              r.value["ts"] if r else None))
     .send_to(app.output(mem.output("found"))))
    return app, events


EVENTS = [{"kind": "put", "user": "u1", "ts": 0}, {"kind": "get", "user": "u1", "ts": 5},
          {"kind": "put", "user": "u2", "ts": 20}, {"kind": "get", "user": "u1", "ts": 21},
          {"kind": "get", "user": "u2", "ts": 21}, {"kind": "put", "user": "u1", "ts": 25},
          {"kind": "get", "user": "u1", "ts": 26}]


def test_test_runner_event_time_ttl_matches_the_reference_model() -> None:
    from samza_dsl.testing.model import table_join
    app, events = _lookup_app(timedelta(seconds=10), ttl_event_time=lambda e: e["ts"])
    got = TestRunner(app).add_input(events, EVENTS).run().messages("found")
    arrivals = [("put" if e["kind"] == "put" else "message", KV(e["user"], e)) for e in EVENTS]
    want = table_join(arrivals, combine=lambda m, r: (m.value["user"], m.value["ts"],
                                                      r.value["ts"] if r else None),
                      ttl_ms=10_000, event_time=lambda e: e["ts"])
    assert got == want == [("u1", 5, 0), ("u1", 21, None), ("u2", 21, 20), ("u1", 26, 25)]


def test_table_ttl_is_checked_and_named() -> None:
    app = StreamApplication("ttl")
    for bad in (0, -5, "1h", timedelta(0)):
        with pytest.raises(PlanError, match="table 'sessions': ttl"):
            app.table("sessions", serde=SERDE, ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="table 'sessions': ttl_event_time= needs ttl="):
        app.table("sessions", serde=SERDE, ttl_event_time=lambda v: 0)
    with pytest.raises(PlanError, match="ttl_event_time must be a function"):
        app.table("sessions", serde=SERDE, ttl=1, ttl_event_time=5)  # type: ignore[arg-type]


def test_a_table_without_ttl_keeps_its_bytes() -> None:
    app, mem = StreamApplication("plain"), MemorySystem()
    table = app.table("plain", serde=SERDE)
    app.input(mem.input("in")).map(lambda v: KV("k", v)).send_to(table)
    from planner import plan
    from runtime.state.codec import store_codecs
    ke, kd, ve, vd = store_codecs(plan(app.spec()), "plain")
    assert ve({"a": 1}) == JsonSerde().serialize({"a": 1})


def _local_app() -> StreamApplication:
    from samza_dsl.systems import LocalSystem
    app, local = StreamApplication("ttl"), LocalSystem("local")
    events = local.input("events", partitions=1, serde=JsonSerde())
    table = app.table("sessions", serde=SERDE, ttl=timedelta(seconds=10),
                      ttl_event_time=lambda e: e["ts"])
    s = app.input(events)
    s.filter(lambda e: e["kind"] == "put").map(lambda e: KV(e["user"], e)).send_to(table)
    (s.filter(lambda e: e["kind"] == "get").map(lambda e: KV(e["user"], e))
     .join_table(table, combine=lambda m, r: [m.value["user"], m.value["ts"],
                                              r.value["ts"] if r else None])
     .send_to(app.output(local.output("found", serde=JsonSerde()))))
    return app


def _on_disk(job_dir: Any) -> dict[str, int]:
    """The table's LMDB store as it is on disk: key -> write time (ms)."""
    from samza_dsl.serdes import BytesSerde
    raw = BytesSerde()
    from runtime.host.jobdir import store_dir
    store = LmdbStore.open(store_dir(str(job_dir), "sessions", "Partition 0"), name="sessions",
                           task="Partition 0", key_encode=str.encode, key_decode=bytes.decode,
                           value_encode=raw.serialize, value_decode=raw.deserialize)
    try:
        return {k: write_time(v) for k, v in store.all()}
    finally:
        store.close()


def test_embedded_system_purges_expired_entries_from_lmdb_and_the_changelog(
        tmp_path: Any) -> None:
    import shutil

    from runtime import LocalRunner
    from runtime.local.log import LocalLog

    job_dir = tmp_path / "job"
    events = [*EVENTS, {"kind": "put", "user": "u3", "ts": 40}]  # u1 and u2 expire
    runner = LocalRunner(_local_app(), {"job.dir": str(job_dir)}, inputs={"events": events})
    runner.run()
    assert runner.messages("found") == [["u1", 5, 0], ["u1", 21, None], ["u2", 21, 20],
                                        ["u1", 26, 25]]
    runner.close()
    assert _on_disk(job_dir) == {"u3": 40_000}
    lg = LocalLog(job_dir / "logs" / "local")
    _, records = lg.read("ttl-1-sessions-changelog", 0, 0, 1000)
    last = {r[0].decode(): r[1] for r in records}  # what compaction keeps of each key
    assert last["u1"] is None and last["u2"] is None and write_time(last["u3"]) == 40_000
    lg.close()
    # the dump of the changelog shows the values, without their write times
    import json

    from runtime.engine.dump import dump_lines
    from runtime.local.job_system import dump_sources
    from runtime.local.system import LocalJob
    job = LocalJob(_local_app(), {"job.dir": str(job_dir)}, run=False)
    try:
        dumped = [json.loads(line) for line in dump_lines(
            dump_sources(job)["ttl-1-sessions-changelog"])]
    finally:
        job.close()
    assert {"key": "u3", "value": {"kind": "put", "user": "u3", "ts": 40}} in dumped, dumped
    # a restore from the changelog brings none of them back
    shutil.rmtree(job_dir / "stores")
    LocalRunner(_local_app(), {"job.dir": str(job_dir)}).run().close()
    assert _on_disk(job_dir) == {"u3": 40_000}
