"""The whole example of ``examples/orders_to_postgres_and_iceberg`` (README.md there), run as a
user runs it from a fresh clone of the repository: order events on Kafka, ``partition_by``
customer, one-minute windows of event time, each pane upserted into PostgreSQL and appended to
an Iceberg table, exactly once.

The test clones the repository (``git clone``, so only what is committed), starts a PostgreSQL
of its own (``samza_dsl.testing.postgres``) and makes the table from the example's
``schema.sql``, loads the example's ``orders.jsonl`` with ``samza-dsl load``, and runs the job
with ``samza-dsl run`` from the clone (the clone's packages first on ``PYTHONPATH``), on the
broker of ``kafka_bootstrap``. The runs are killed with SIGKILL inside a commit: right after
PostgreSQL took the commit's rows and the Iceberg output staged its files, before the checkpoint
(``SAMZA_DSL_CRASH_AT=commit.sinks-prepared:N``), or right after the checkpoint, before the
Iceberg append (``commit.checkpointed:N``); N grows from run to run, and each task commits only
as its part of the run ends, so the runs are killed at the same steps on both brokers,
and each next run starts from the last checkpoint, until one ends by itself. Then the
PostgreSQL table holds one row per (customer, minute) with its total, and the Iceberg table
(read through pyiceberg) holds each pane exactly once, both against the totals computed here,
in plain Python, from the sample file. The check can fail: with the Iceberg output appending
at ``prepare`` (before the checkpoint) instead of at ``commit``, a kill leaves the panes of one
task appended twice, on both brokers: a pane is fired by the watermark, not by an input
message, so no position can skip it.

The commands are the README's (run quietly, commits at the end of each task's part): the job
and its topics keep the example's names (``order-totals-1``, ``orders``), which no other test of
the session's broker uses.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from samza_dsl.testing.postgres import PostgresServer
from tests.proc_helpers import finish

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/orders_to_postgres_and_iceberg"
APP = f"{EXAMPLE}/orders.py:app"
CLI = str(Path(sys.executable).with_name("samza-dsl"))
#: run k is killed at its (STEP * k)-th commit of a task with sinks (about 12 in a whole run)
STEP = 4
MAX_RUNS = 8


def _expected(sample: Path) -> dict[tuple[str, datetime], tuple[int, int]]:
    """{(customer, minute): (orders, total in cents)} of the sample, in plain Python."""
    out: dict[tuple[str, datetime], list[int]] = collections.defaultdict(lambda: [0, 0])
    for line in sample.read_text().splitlines():
        order = json.loads(line)["value"]
        start = int(order["ts"]) // 60 * 60
        acc = out[(order["customer"], datetime.fromtimestamp(start, tz=UTC))]
        acc[0] += 1
        acc[1] += order["amount_cents"]
    return {k: (n, total) for k, (n, total) in out.items()}


class Example:
    """The example in a fresh clone, its database, its lake and its commands."""

    def __init__(self, clone: Path, bootstrap: str, pg: PostgresServer) -> None:
        self.clone = clone
        self.pg = pg
        self.lake = clone / "lake"
        self.env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap,
                    "ORDERS_POSTGRES": pg.conninfo, "ORDERS_LAKE": str(self.lake),
                    "PYTHONPATH": str(clone), "PYTHONFAULTHANDLER": "1",
                    "PATH": f"{Path(CLI).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.env.pop("SAMZA_DSL_CRASH_AT", None)

    def cli(self, *args: str, crash_at: str | None = None) -> tuple[int, str]:
        env = dict(self.env)
        if crash_at is not None:
            env["SAMZA_DSL_CRASH_AT"] = crash_at
        proc = subprocess.Popen([CLI, *args], cwd=self.clone, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return finish(proc, None, 120)

    def postgres_rows(self) -> dict[tuple[str, datetime], tuple[int, int]]:
        rows = self.pg.execute("SELECT customer, minute, orders, total_cents "
                               "FROM customer_minute_totals")
        return {(c, m.astimezone(UTC)): (n, t) for c, m, n, t in rows}

    def iceberg_rows(self) -> list[dict[str, Any]]:
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.exceptions import NoSuchTableError

        catalog = SqlCatalog("lake", uri=f"sqlite:///{self.lake}/catalog.db")
        try:
            table = catalog.load_table("shop.customer_minute_totals")
        except NoSuchTableError:
            return []
        rows: list[dict[str, Any]] = table.scan().to_arrow().to_pylist()
        return rows


def test_the_orders_example_from_a_fresh_clone_is_exactly_once_after_kills(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    began = time.monotonic()
    clone = tmp_path / "samza-dsl"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True,
                   capture_output=True, timeout=120)
    assert (clone / APP.partition(":")[0]).exists(), f"{APP} is not committed"
    expected = _expected(clone / EXAMPLE / "orders.jsonl")
    assert len(expected) > 50  # panes of several customers over many minutes

    with PostgresServer("orders") as pg:
        pg.execute((clone / EXAMPLE / "schema.sql").read_text())
        job = Example(clone, kafka_bootstrap, pg)
        code, err = job.cli("load", APP, "orders", f"{EXAMPLE}/orders.jsonl")
        assert code == 0, err

        # killed inside commits, each run from the last checkpoint, until one ends by itself
        kills: list[tuple[str, int, int]] = []
        for run in range(1, MAX_RUNS + 1):
            # right after the tables took the commit's rows (PostgreSQL) and staged them
            # (Iceberg), or right after the checkpoint, before the Iceberg append
            step = "commit.checkpointed" if run % 2 == 0 else "commit.sinks-prepared"
            point = f"{step}:{STEP * run}"
            code, err = job.cli("run", APP, "-q", "--show", "0", "-c", "task.commit.ms=-1",
                                crash_at=point)
            if code == 0:
                break
            assert code == -signal.SIGKILL, f"run {run} ({point}) exited with {code}:\n{err}"
            kills.append((point, len(job.postgres_rows()), len(job.iceberg_rows())))
        else:
            pytest.fail(f"the job did not end within {MAX_RUNS} runs: {kills}")
        assert kills, "no run was killed"
        # the tables took rows in a run that was killed, and a later run went over them again
        assert any(pgn or ice for _, pgn, ice in kills), kills

        # PostgreSQL: a row per (customer, minute), its total
        assert job.postgres_rows() == expected

        # Iceberg: each pane once
        rows = job.iceberg_rows()
        panes = collections.Counter((r["customer"], r["minute"].isoformat()) for r in rows)
        twice = sorted(k for k, n in panes.items() if n > 1)
        assert not twice, f"{len(twice)} panes appended more than once: {twice[:5]}..."
        assert {(r["customer"], r["minute"]): (r["orders"], r["total_cents"])
                for r in rows} == expected

        # run again: nothing new, the tables as they were
        code, err = job.cli("run", APP, "-q", "--show", "0")
        assert code == 0, err
        assert job.postgres_rows() == expected and len(job.iceberg_rows()) == len(expected)
    shutil.rmtree(clone, ignore_errors=True)
    print(f"{len(kills)} kills (point, PostgreSQL rows, Iceberg rows after it): {kills}; "
          f"{len(expected)} panes; {time.monotonic() - began:.1f} s")
