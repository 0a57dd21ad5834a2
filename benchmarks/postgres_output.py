"""The PostgreSQL output against a plain psycopg COPY loop, in the same run, on the same server.

A job on TestRunner sends ``rows`` dicts ``{"id": int, "user": str, "amount": float}`` from a
memory input to a PostgreSQL output (``samza_dsl.postgres``: three declared columns, plain
inserts in COPY batches of 5,000 rows, each commit's rows and positions one transaction),
timed from the run's start to its end; the baseline is a plain loop that COPYs the same rows
(the same three values of each dict) into a table of its own in batches of 5,000 rows, one
transaction per batch. The server is started by ``samza_dsl.testing.postgres`` (fsync off for
both). Each is run ``--runs`` times, alternating, each into an emptied table; one JSON line per
run and a median line with the ratio.

    .venv/bin/python -m benchmarks.postgres_output --rows 500000 --runs 3
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

from benchmarks.common import RowRuns

BATCH = 5000
TABLE = "CREATE TABLE {} (id bigint, \"user\" text, amount double precision)"


def make_rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "user": f"user-{i % 5000}", "amount": i * 0.25} for i in range(n)]


def plain_loop(rows: list[dict[str, Any]], conninfo: str) -> float:
    """psycopg alone: COPY of BATCH rows a transaction."""
    began = time.perf_counter()
    with psycopg.connect(conninfo) as conn:
        for i in range(0, len(rows), BATCH):
            with conn.cursor().copy('COPY plain (id, "user", amount) FROM STDIN') as copy:
                for r in rows[i:i + BATCH]:
                    copy.write_row((r["id"], r["user"], r["amount"]))
            conn.commit()
    return time.perf_counter() - began


def job(rows: list[dict[str, Any]], conninfo: str) -> float:
    """The same rows through a job's PostgreSQL output on TestRunner."""
    from samza_dsl import StreamApplication
    from samza_dsl.postgres import PostgresSystem
    from samza_dsl.systems import MemorySystem
    from samza_dsl.testing import TestRunner

    app = StreamApplication("postgres-bench")
    mem = MemorySystem()
    inp = mem.input("rows")
    out = app.output(PostgresSystem("pg", conninfo=conninfo).output_table(
        "out", table="job", columns={"id": "id", "user": "user", "amount": "amount"},
        batch_rows=BATCH))
    app.input(inp).send_to(out)
    runner = TestRunner(app).add_input(inp, rows)
    began = time.perf_counter()
    runner.run(timeout=600)
    return time.perf_counter() - began


def main() -> None:
    from samza_dsl.testing.postgres import PostgresServer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rows = make_rows(args.rows)
    runs = RowRuns("postgres-output", args.rows)
    with PostgresServer("bench") as server:
        server.execute(TABLE.format("plain"))
        server.execute(TABLE.format("job"))
        for _ in range(args.runs):
            server.execute("TRUNCATE plain")
            server.execute("TRUNCATE job")
            server.execute("DROP TABLE IF EXISTS samza_dsl_positions")
            p = plain_loop(rows, server.conninfo)
            j = job(rows, server.conninfo)
            got = server.execute("SELECT count(*) FROM job")[0][0]
            assert got == args.rows, f"the job's table holds {got} rows, not {args.rows}"
            runs.add(p, j)
    runs.summary()


if __name__ == "__main__":
    main()
