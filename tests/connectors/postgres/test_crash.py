"""The PostgreSQL output under SIGKILL, for real: the job of ``pg_app.py`` runs as a subprocess
on the embedded local system, reading while a thread of the test appends input, and is killed
20 times: at every commit point of a task with sinks (``runtime.engine.faults``: the database's commit
is ``commit.sinks-prepared``'s prepare, so a kill at that point leaves the database ahead of
the checkpoint) and at random times (seeded). A last run drains the input. Then every kept
input id is a row of the table exactly once, and the positions table holds each partition's
last offset."""

from __future__ import annotations

import os
from pathlib import Path

from runtime.ops.loader import load_app
from tests.sink_crash_helpers import assert_each_once, kill_and_drain

APP = f"{Path(__file__).with_name('pg_app.py')}:app"
KILLS = int(os.environ.get("SAMZA_DSL_PG_KILLS", "20"))
SEED = int(os.environ.get("SAMZA_DSL_PG_SEED", "20260412"))


def test_sigkill_while_input_is_appended_leaves_each_row_once(pg, tmp_path: Path) -> None:
    pg.execute("CREATE TABLE events (id bigint, task int)")
    loaded, kills = kill_and_drain(APP, load_app(APP), tmp_path / "job",
                                   {"SAMZA_DSL_PG_CONNINFO": pg.conninfo}, KILLS, SEED,
                                   after=(0.8, 2.0), commit_ms=20)
    assert_each_once(dict(pg.execute("SELECT id, count(*) FROM events GROUP BY id")), loaded)
    positions = pg.execute("SELECT stream, part, last_offset FROM samza_dsl_positions "
                           "WHERE part >= 0")
    assert sum(o + 1 for _, _, o in positions) == loaded
    print(f"{len(kills)} kills ({', '.join(kills)}); {loaded} events")
