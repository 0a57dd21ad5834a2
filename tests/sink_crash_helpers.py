"""The crash proof of an output whose sink keeps its own positions (PostgreSQL, Iceberg): the
job runs as a subprocess on the embedded local system while a thread appends input, and is
killed at every commit point of a task with sinks, then at seeded random points and times; a
last run drains the input. The test then reads the external system and checks each kept id is
there once (``assert_each_once``)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from runtime.engine.faults import POINTS, SINK_POINTS
from runtime.local.system import LocalJob
from samza_dsl import KV
from tests.proc_helpers import finish

ROOT = Path(__file__).resolve().parents[1]
#: the points a commit of a job with sinks and no stores reaches (no changelog points)
REACHED = [p for p in POINTS + SINK_POINTS
           if p not in ("commit.changelogged", "commit.stores-committed")]


def run_job(app: str, job_dir: Path, env_extra: Mapping[str, str], crash_at: str | None,
            kill_after: float | None, follow: bool, commit_ms: int) -> tuple[int, str]:
    """``samza-dsl run APP`` on ``job_dir``, dying at ``crash_at`` or SIGKILLed after
    ``kill_after`` s (20 s at most: a crash point is reached within seconds); exit code, stderr."""
    env = dict(os.environ)
    env.pop("SAMZA_DSL_CRASH_AT", None)
    env.update(env_extra)
    if crash_at:
        env["SAMZA_DSL_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "runtime.ops.cli", "run", app, "-c", f"job.dir={job_dir}",
           "-c", f"task.commit.ms={commit_ms}", "-q", "--show", "0"] + (
        ["--follow"] if follow else [])
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return finish(proc, kill_after if kill_after is not None else 20.0, 60)


class Appender(threading.Thread):
    """Appends chunks of events ``{"id": i}`` to the job's input ``events`` while it runs."""

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


def _pick(rng: random.Random, after: tuple[float, float]) -> tuple[str | None, float | None, str]:
    if rng.random() < 0.4:
        t = rng.uniform(*after)
        return None, t, f"after {t:.2f}s"
    point = rng.choice(REACHED)
    point = f"{point}:{rng.randint(1, 2 if point == 'batch' else 8)}"
    return point, None, point


def kill_and_drain(app_ref: str, app: object, job_dir: Path, env_extra: Mapping[str, str],
                   kills: int, seed: int, after: tuple[float, float],
                   commit_ms: int) -> tuple[int, list[str]]:
    """``kills`` runs of the job SIGKILLed (each sink commit point twice, a commit's start, then
    seeded points and times in ``after`` s) while input is appended, and a last bounded run
    that drains it; how many events were loaded, and where each run died."""
    rng = random.Random(seed)
    appender = Appender(app, {"job.dir": str(job_dir)})
    appender.append(200)
    planned = [f"{p}:{n}" for p in SINK_POINTS for n in (1, 4)] + ["commit.start:3"]
    died: list[str] = []
    rounds = 0
    appender.start()
    try:
        while len(died) < kills:
            rounds += 1
            assert rounds <= kills * 2, f"only {len(died)} kills in {rounds} rounds: {died}"
            if planned:
                point = where = planned.pop(0)
                t = None
            else:
                point, t, where = _pick(rng, after)
            code, err = run_job(app_ref, job_dir, env_extra, point, t, True, commit_ms)
            assert code == -signal.SIGKILL, f"run {rounds} ({where}) exited with {code}:\n{err}"
            died.append(where or "")
    finally:
        appender.stop.set()
        appender.join()
    assert appender.error is None, appender.error
    code, err = run_job(app_ref, job_dir, env_extra, None, None, False, commit_ms)
    assert code == 0, err
    return appender.loaded, died


def assert_each_once(counts: Mapping[int, int], loaded: int) -> None:
    """Every id the job keeps (it drops those ending in 9) of the ``loaded`` ones is there
    once, and nothing else is."""
    kept = {i for i in range(loaded) if i % 10 != 9}
    missing = kept - set(counts)
    twice = {i: n for i, n in counts.items() if n > 1}
    assert not missing, f"ids {sorted(missing)[:10]} never written ({len(missing)} in all)"
    assert not twice, f"ids written more than once: {dict(list(twice.items())[:10])}"
    assert set(counts) == kept
