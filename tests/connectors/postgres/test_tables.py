"""PostgreSQL tables to join with: a remote table read by key (batched ``= ANY`` queries, with
the remote tables' cache) and a side table loaded whole at start."""

from __future__ import annotations

from samza_dsl import KV, CacheSpec, StreamApplication
from samza_dsl.postgres import PostgresSystem
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner


def _profiles(pg) -> None:
    pg.execute("CREATE TABLE profiles (id text PRIMARY KEY, tier text, score int)")
    pg.execute("INSERT INTO profiles SELECT 'u' || i, CASE WHEN i % 2 = 0 THEN 'gold' "
               "ELSE 'silver' END, i FROM generate_series(0, 49) i")


def _queries(app: StreamApplication) -> int:
    """The queries the table's reader has sent (TestRunner runs in this process)."""
    return app._remote_tables["profiles"].read.__self__.queries  # type: ignore[union-attr]


def _join(table_of) -> tuple[StreamApplication, object]:
    app, mem = StreamApplication("pg-join"), MemorySystem()
    table = table_of(app)
    out = mem.output("enriched")
    (app.input(mem.input("views")).map(lambda u: KV(u, None))
        .join_table(table, combine=lambda v, p: (v.key, p and p.value), name="with-profile")
        .send_to(app.output(out)))
    return app, out


def test_remote_table_reads_by_key_in_batches_through_a_cache(pg) -> None:
    _profiles(pg)
    pg_sys = PostgresSystem("pg", conninfo=pg.conninfo)
    app, out = _join(lambda app: pg_sys.remote_table(
        app, "profiles", table="profiles", key="id", columns=["tier", "score"],
        cache=CacheSpec(ttl=60, size=1000), batch_size=50))
    views = [f"u{i % 60}" for i in range(600)]
    result = TestRunner(app, {"task.max.concurrency": 64}).add_input("views", views).run()
    got = result.messages(out)
    assert len(got) == 600
    for user, profile in got:
        i = int(user[1:])
        assert profile == (None if i >= 50 else
                           {"tier": "gold" if i % 2 == 0 else "silver", "score": i}), user
    # 60 distinct keys behind a cache and batches: far fewer queries than the 600 lookups
    queries = _queries(app)
    assert 1 <= queries < 60, queries


def test_side_table_loads_the_rows_at_start(pg) -> None:
    _profiles(pg)
    pg_sys = PostgresSystem("pg", conninfo=pg.conninfo)
    app, out = _join(lambda app: pg_sys.side_table(app, "profiles", table="profiles",
                                                   key="id", columns=["tier"]))
    result = TestRunner(app).add_input("views", ["u3", "u4", "nobody", "u3"]).run()
    assert result.messages(out) == [("u3", "silver"), ("u4", "gold"), ("nobody", None),
                                    ("u3", "silver")]
    assert _queries(app) == 1  # one read of the whole table
