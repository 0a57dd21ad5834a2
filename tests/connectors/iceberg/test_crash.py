"""The Iceberg output under SIGKILL, for real: the job of ``ice_app.py`` runs as a subprocess on
the embedded local system, reading while a thread of the test appends input, and is killed
at every commit point of a task with sinks (``runtime.faults``: the snapshot's commit is
``commit.sinks-prepared``'s prepare, so a kill at that point leaves the table ahead of the
checkpoint) and at random times (seeded). A last run drains the input. Then every kept input
id is a row of the table exactly once, and the snapshots of each task hold the last offset of
its partition."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from runtime.faults import POINTS, SINK_POINTS
from runtime.loader import load_app
from runtime.local.system import LocalJob
from samza_dsl import KV
from tests.proc_helpers import finish

ROOT = Path(__file__).resolve().parents[3]
APP = f"{Path(__file__).with_name('ice_app.py')}:app"
KILLS = int(os.environ.get("SAMZA_DSL_ICEBERG_KILLS", "10"))
SEED = int(os.environ.get("SAMZA_DSL_ICEBERG_SEED", "20260517"))
#: the points a commit of this job reaches (it has no stores: no changelog points)
REACHED = [p for p in POINTS + SINK_POINTS
           if p not in ("commit.changelogged", "commit.stores-committed")]


def _run(job_dir: Path, lake: Path, crash_at: str | None, kill_after: float | None,
         follow: bool) -> tuple[int, str]:
    env = dict(os.environ)
    env.pop("SAMZA_DSL_CRASH_AT", None)
    env["SAMZA_DSL_ICEBERG_LAKE"] = str(lake)
    if crash_at:
        env["SAMZA_DSL_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "runtime.cli", "run", APP, "-c", f"job.dir={job_dir}",
           "-c", "task.commit.ms=30", "-q", "--show", "0"] + (["--follow"] if follow else [])
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # a crash point is reached within seconds; a run that has not died by then is killed too
    return finish(proc, kill_after if kill_after is not None else 20.0, 60)


class Appender(threading.Thread):
    """Appends chunks of events to the job's input while it runs."""

    def __init__(self, app: object, config: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.app, self.config = app, config
        self.loaded = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(0.03):
                self.append(60)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def append(self, n: int) -> None:
        job = LocalJob(self.app, self.config, run=False)
        try:
            job.load("events", [KV(str(i), {"id": i}) for i in range(self.loaded,
                                                                    self.loaded + n)])
        finally:
            job.close()
        self.loaded += n


def _pick(rng: random.Random) -> tuple[str | None, float | None, str]:
    if rng.random() < 0.4:
        after = rng.uniform(1.2, 2.5)  # past the interpreter's start and pyiceberg's import
        return None, after, f"after {after:.2f}s"
    point = rng.choice(REACHED)
    point = f"{point}:{rng.randint(1, 2 if point == 'batch' else 8)}"
    return point, None, point


def test_sigkill_while_input_is_appended_leaves_each_row_once(tmp_path: Path) -> None:
    app = load_app(APP)
    job_dir, lake = tmp_path / "job", tmp_path / "lake"
    config = {"job.dir": str(job_dir)}
    rng = random.Random(SEED)
    appender = Appender(app, config)
    appender.append(200)
    planned = [f"{p}:{n}" for p in SINK_POINTS for n in (1, 4)] + ["commit.start:3"]
    kills: list[str] = []
    rounds = 0
    appender.start()
    try:
        while len(kills) < KILLS:
            rounds += 1
            assert rounds <= KILLS * 2, f"only {len(kills)} kills in {rounds} rounds: {kills}"
            if planned:
                point = where = planned.pop(0)
                after = None
            else:
                point, after, where = _pick(rng)
            code, err = _run(job_dir, lake, point, after, follow=True)
            assert code == -signal.SIGKILL, f"run {rounds} ({where}) exited with {code}:\n{err}"
            kills.append(where or "")
    finally:
        appender.stop.set()
        appender.join()
    assert appender.error is None, appender.error
    code, err = _run(job_dir, lake, None, None, follow=False)
    assert code == 0, err
    table = SqlCatalog("lake", uri=f"sqlite:///{lake}/catalog.db").load_table("lake.events")
    counts = Counter(table.scan().to_arrow().column("id").to_pylist())
    kept = {i for i in range(appender.loaded) if i % 10 != 9}
    missing = kept - set(counts)
    twice = {i: n for i, n in counts.items() if n > 1}
    assert not missing, f"ids {sorted(missing)[:10]} never written ({len(missing)} in all)"
    assert not twice, f"ids written more than once: {dict(list(twice.items())[:10])}"
    assert set(counts) == kept
    # each task's newest snapshot holds its partition's last offset
    last: dict[str, list[list[object]]] = {}
    for snap in table.snapshots():  # oldest first: the newest of each task stays
        props = snap.summary.additional_properties
        last.update({k: json.loads(v) for k, v in props.items()
                     if k.startswith("samza-dsl.positions.")})
    assert sorted(last) == [f"samza-dsl.positions.partition-{p}" for p in range(4)]
    assert sum(int(o) + 1 for v in last.values() for _, _, o in v) == appender.loaded  # type: ignore[call-overload]
    print(f"{len(kills)} kills ({', '.join(kills)}); {appender.loaded} events; "
          f"{len(table.snapshots())} snapshots")
