"""The PostgreSQL output takes runs of messages (``write_batch``): rows made in one pass where
the columns are fields of dicts, a missing field still NULL, COPY batches of ``batch_rows``
across runs, and a restart that skips, within a run, the messages whose rows the database holds
(their input positions, ``Sources``)."""

from __future__ import annotations

from typing import Any

from samza_dsl import StreamApplication
from samza_dsl.postgres import PostgresSystem
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner


def _run(conninfo: str, msgs: list[Any], **kw: Any) -> None:
    app = StreamApplication("pg-runs")
    inp = MemorySystem().input("orders")
    out = app.output(PostgresSystem("pg", conninfo=conninfo).output_table(
        "rows", table="orders", columns={"id": "id", "who": "who", "amount": "amount"}, **kw))
    app.input(inp).filter(lambda m: m["id"] % 5 != 4, name="some").send_to(out)
    TestRunner(app).add_input(inp, msgs).run()


def _orders(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "who": f"u{i % 3}", "amount": i / 4} for i in range(n)]


def test_rows_of_dicts_in_runs_a_missing_field_null(pg) -> None:
    pg.execute("CREATE TABLE orders (id bigint, who text, amount double precision)")
    msgs: list[dict[str, Any]] = _orders(300)
    msgs[10] = {"id": 10, "amount": 2.5}  # no "who"
    _run(pg.conninfo, msgs, batch_rows=7)
    rows = pg.execute("SELECT id, who, amount FROM orders ORDER BY id")
    assert rows == [(m["id"], m.get("who"), m["amount"]) for m in msgs if m["id"] % 5 != 4]


def test_a_restart_skips_within_a_run_what_the_database_holds(pg) -> None:
    """Started afresh over a longer input: the first 200 messages' rows are there already;
    the runs that hold both those and new ones write the new ones only."""
    pg.execute("CREATE TABLE orders (id bigint, who text, amount double precision)")
    _run(pg.conninfo, _orders(200), batch_rows=7)
    _run(pg.conninfo, _orders(500), batch_rows=7)
    assert pg.execute("SELECT count(*), count(DISTINCT id), min(id), max(id) FROM orders") == \
        [(400, 400, 0, 498)]
    assert pg.execute("SELECT last_offset FROM samza_dsl_positions WHERE part >= 0") == [(499,)]
