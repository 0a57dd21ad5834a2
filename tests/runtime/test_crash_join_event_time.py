"""Crash safety of the event-time join's state (``operators.join_event_time``), for real: the
left join of ``etjoin_app.py`` (ride requests with acceptances within 60 s, 4 s of disorder) runs
as a subprocess on the embedded local system with ``--follow`` and is killed with SIGKILL at
random points (seeded): inside commits, after a processed batch (messages held in memory, not
yet in the store) or at a random time. After each kill more input arrives, continuing in event
time (so pairs span the kills), and the job restarts from its checkpoint, its join state taken
back from its stores; a last run ends at the input's end, which emits the unmatched requests.
The same input, loaded at once, goes through one uninterrupted run in another job directory.
Then every match the killed job emitted is in the plain-Python answer and it emitted all of
them (some twice: outputs are at-least-once), as the uninterrupted run did.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from etjoin_app import pairs, rides
from test_crash import ROOT
from test_crash import _run as run_killable

from runtime.local.system import LocalJob
from runtime.ops.loader import load_app
from tests.proc_helpers import finish

APP = f"{Path(__file__).resolve().parent / 'etjoin_app.py'}:app"
KILLS = int(os.environ.get("SAMZA_DSL_CRASH_KILLS", "6"))
SEED = int(os.environ.get("SAMZA_DSL_CRASH_SEED", "20261127"))
CHUNK = 2000
#: drivers: about 3 acceptances within reach of a request
DRIVERS = 500
#: commits come often
CONFIG = ("-c", "task.commit.ms=20")
#: where a run is killed (a run that reaches none of them is killed after ``KILL_BY`` s)
POINTS = ("batch", "commit.start", "commit.changelogged", "commit.stores-committed",
          "commit.done")
KILL_BY = 4.0


def pick_kill(rng: random.Random) -> tuple[str | None, float, str]:
    if rng.random() < 0.25:
        kill_after = rng.uniform(1.5, KILL_BY)
        return None, kill_after, f"after {kill_after:.2f}s"
    point = f"{rng.choice(POINTS)}:{rng.randint(1, 8)}"
    return point, KILL_BY, point


def _follow(job_dir: Path, crash_at: str | None, kill_after: float) -> tuple[int, str]:
    """The job with ``--follow`` (it never ends by itself), killed at ``crash_at`` or after
    ``kill_after`` s."""
    env = dict(os.environ)
    env.pop("SAMZA_DSL_CRASH_AT", None)
    if crash_at:
        env["SAMZA_DSL_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "runtime.ops.cli", "run", APP, "-c", f"job.dir={job_dir}",
           *CONFIG, "-q", "--show", "0", "--follow"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return finish(proc, kill_after, 120)


def _load(app: Any, job_dir: Path, reqs: list[Any], accs: list[Any]) -> None:
    job = LocalJob(app, {"job.dir": str(job_dir)}, run=False)
    try:
        job.load("requests", reqs)
        job.load("accepts", accs)
    finally:
        job.close()


def _matches(app: Any, job_dir: Path) -> list[list[Any]]:
    job = LocalJob(app, {"job.dir": str(job_dir)}, run=False)
    try:
        return [list(m) for m in job.messages("matches", since_start=False)]
    finally:
        job.close()


def test_sigkill_between_commits_gives_the_same_matches(tmp_path: Path) -> None:
    app = load_app(APP)
    job_dir = tmp_path / "killed"
    rng = random.Random(SEED)
    start = 1_700_000_000_000
    every: tuple[list[Any], list[Any]] = ([], [])
    kills: list[str] = []
    rounds = 0
    while len(kills) < KILLS:
        rounds += 1
        assert rounds <= KILLS * 3, f"only {len(kills)} kills in {rounds} rounds: {kills}"
        reqs, accs = rides(rng, CHUNK, disorder_s=4.0, start_ms=start, drivers=DRIVERS)
        start = max(round(kv.value["ts"] * 1000) for kv in reqs)  # the next chunk goes on
        every[0].extend(reqs)
        every[1].extend(accs)
        _load(app, job_dir, reqs, accs)
        point, kill_after, where = pick_kill(rng)
        code, err = _follow(job_dir, point, kill_after)
        assert code == -signal.SIGKILL, f"run {rounds} ({where}) exited with {code}:\n{err}"
        kills.append(where)
    code, err = run_killable(job_dir, None, None, APP, CONFIG[1:])
    assert code == 0, err
    assert "late message" not in err, err

    whole = tmp_path / "uninterrupted"
    _load(app, whole, *every)
    code, err = run_killable(whole, None, None, APP, CONFIG[1:])
    assert code == 0, err

    truth = pairs(*every, how="left")
    assert len(truth) > CHUNK * KILLS
    killed = _matches(app, job_dir)
    every_match = set(map(tuple, truth))
    wrong = [m for m in killed if tuple(m) not in every_match]
    assert not wrong, f"matches not in the plain-Python answer: {wrong[:10]}"
    missed = every_match - set(map(tuple, killed))
    assert not missed, f"{len(missed)} matches missed, e.g. {sorted(missed, key=repr)[:10]}"
    assert sorted(_matches(app, whole), key=repr) == truth
    print(f"{len(kills)} kills ({', '.join(kills)}); {len(truth)} matches; "
          f"{len(killed) - len(truth)} emitted again after a kill")
