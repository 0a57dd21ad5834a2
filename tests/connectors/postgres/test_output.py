"""The PostgreSQL output on TestRunner: rows inserted or upserted from the declared columns in
COPY batches, the positions table beside them, and what a restart skips."""

from __future__ import annotations

import pytest

from samza_dsl import KV, StreamApplication
from samza_dsl.postgres import PostgresSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem
from samza_dsl.testing import TestRunner

SERDE = KVSerde(StringSerde(), JsonSerde())


def _app(conninfo: str, **kw: object) -> tuple[StreamApplication, object, object]:
    app = StreamApplication("pg-out")
    local = LocalSystem("local")
    events = local.input("events", serde=SERDE, partitions=2)
    pg = PostgresSystem("pg", conninfo=conninfo)
    out = app.output(pg.output_table("rows", table="items",
                                     columns={"id": "key", "n": "n",
                                              "twice": lambda kv: kv.value["n"] * 2},
                                     **kw))  # type: ignore[arg-type]
    app.input(events).send_to(out)
    return app, events, out


def test_insert_in_batches(pg) -> None:
    pg.execute("CREATE TABLE items (id text, n int, twice int)")
    app, events, _ = _app(pg.conninfo, batch_rows=7)
    msgs = [KV(f"k{i}", {"n": i}) for i in range(100)]
    TestRunner(app).add_input(events, msgs).run()
    rows = pg.execute("SELECT id, n, twice FROM items ORDER BY n")
    assert rows == [(f"k{i}", i, 2 * i) for i in range(100)]
    positions = pg.execute("SELECT task, stream, part, last_offset FROM samza_dsl_positions "
                           "WHERE part >= 0 ORDER BY part")
    assert sum(o + 1 for _, _, _, o in positions) == 100
    assert {(s, p) for _, s, p, _ in positions} == {("events", 0), ("events", 1)}


def test_upsert_by_key(pg) -> None:
    pg.execute("CREATE TABLE items (id text PRIMARY KEY, n int, twice int, other text "
               "DEFAULT 'kept')")
    pg.execute("INSERT INTO items VALUES ('k1', -1, -1, 'x')")
    app, events, _ = _app(pg.conninfo, key=["id"], upsert=True, batch_rows=3)
    msgs = [KV(f"k{i % 5}", {"n": i}) for i in range(20)]
    TestRunner(app).add_input(events, msgs).run()
    rows = pg.execute("SELECT id, n, twice, other FROM items ORDER BY id")
    # the last message of each key wins; a column the output does not name is left as it was
    assert rows == [(f"k{k}", 15 + k, 2 * (15 + k), "x" if k == 1 else "kept")
                    for k in range(5)]


def test_a_restart_skips_what_the_database_holds(pg) -> None:
    """The database ahead of the checkpoint (here: no checkpoint at all, a job started afresh
    over the same input): the replayed messages' rows are not written again."""
    pg.execute("CREATE TABLE items (id text, n int, twice int)")
    msgs = [KV(f"k{i}", {"n": i}) for i in range(30)]
    for _ in range(2):
        app, events, _ = _app(pg.conninfo)
        TestRunner(app).add_input(events, msgs).run()
    assert pg.execute("SELECT count(*), count(DISTINCT id) FROM items") == [(30, 30)]


def test_errors_are_one_line_naming_the_table(pg) -> None:
    app, events, _ = _app(pg.conninfo)  # no table items
    with pytest.raises(Exception) as info:
        TestRunner(app).add_input(events, [KV("a", {"n": 1})]).run()
    text = str(info.value)
    assert "items" in text and "does not exist" in text, text


def test_declarations_are_checked() -> None:
    pg = PostgresSystem("pg", conninfo="dbname=x")
    with pytest.raises(ValueError, match="upsert=True needs key="):
        pg.output_table("o", table="t", columns={"a": "a"}, upsert=True)
    with pytest.raises(ValueError, match="not in columns="):
        pg.output_table("o", table="t", columns={"a": "a"}, key=["b"])
    with pytest.raises(ValueError, match="columns="):
        pg.output_table("o", table="t", columns={})
