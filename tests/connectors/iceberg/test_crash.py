"""The Iceberg output under SIGKILL, for real: the job of ``ice_app.py`` runs as a subprocess on
the embedded local system, reading while a thread of the test appends input, and is killed
at every commit point of a task with sinks (``runtime.engine.faults``: the snapshot's commit is
``commit.sinks-prepared``'s prepare, so a kill at that point leaves the table ahead of the
checkpoint) and at random times (seeded). A last run drains the input. Then every kept input
id is a row of the table exactly once, and the snapshots of each task hold the last offset of
its partition."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from runtime.ops.loader import load_app
from tests.sink_crash_helpers import assert_each_once, kill_and_drain

APP = f"{Path(__file__).with_name('ice_app.py')}:app"
KILLS = int(os.environ.get("SAMZA_DSL_ICEBERG_KILLS", "10"))
SEED = int(os.environ.get("SAMZA_DSL_ICEBERG_SEED", "20260517"))


def test_sigkill_while_input_is_appended_leaves_each_row_once(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    # a random kill comes past the interpreter's start and pyiceberg's import
    loaded, kills = kill_and_drain(APP, load_app(APP), tmp_path / "job",
                                   {"SAMZA_DSL_ICEBERG_LAKE": str(lake)}, KILLS, SEED,
                                   after=(1.2, 2.5), commit_ms=30)
    table = SqlCatalog("lake", uri=f"sqlite:///{lake}/catalog.db").load_table("lake.events")
    assert_each_once(Counter(table.scan().to_arrow().column("id").to_pylist()), loaded)
    # each task's newest snapshot holds its partition's last offset
    last: dict[str, list[list[object]]] = {}
    for snap in table.snapshots():  # oldest first: the newest of each task stays
        props = snap.summary.additional_properties
        last.update({k: json.loads(v) for k, v in props.items()
                     if k.startswith("samza-dsl.positions.")})
    assert sorted(last) == [f"samza-dsl.positions.partition-{p}" for p in range(4)]
    assert sum(int(o) + 1 for v in last.values() for _, _, o in v) == loaded  # type: ignore[call-overload]
    print(f"{len(kills)} kills ({', '.join(kills)}); {loaded} events; "
          f"{len(table.snapshots())} snapshots")
