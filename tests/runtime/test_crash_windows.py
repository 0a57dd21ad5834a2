"""Crash safety of a tumbling window's in-memory pane values (``operators.window``), for real:
the job of ``window_crash_app.py`` runs as a subprocess on the embedded local system and is
killed with SIGKILL at random points (seeded): at a random time, after a processed batch (its
panes changed in memory, not yet in the store), and inside commits. After each kill more input
arrives and the job restarts; a last run finishes. The same input, loaded at once, goes through
one uninterrupted run in another job directory. Then:

- every pane the killed job emitted has exactly the count of its views in the input: no view is
  counted twice or missed, whatever was in memory when the process died;
- the killed job emitted exactly the panes of the uninterrupted run (some may come out twice:
  outputs are at-least-once, with the same count).
"""

from __future__ import annotations

import collections
import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest
from test_crash import _run as run_killable
from test_crash import pick_kill

from runtime.local.system import LocalJob
from runtime.ops.loader import load_app

APP = f"{Path(__file__).resolve().parent / 'window_crash_app.py'}:app"
KILLS = int(os.environ.get("SAMZA_DSL_CRASH_KILLS", "12"))
SEED = int(os.environ.get("SAMZA_DSL_CRASH_SEED", "20261123"))
USERS = 40
CHUNK = 3000
WINDOW_MS = 1000


#: a pane cache of 3 panes a task: every start spills its panes to the store (``_spill``)
SPILL = ("stores.window-crash-1-window-per-user.pane.cache.size=3",)


def _run(job_dir: Path, crash_at: str | None, kill_after: float | None,
         config: tuple[str, ...] = ()) -> tuple[int, str]:
    return run_killable(job_dir, crash_at, kill_after, APP, config)


def _views(rng: random.Random, n: int, clock: list[int]) -> list[Any]:
    """``n`` views, event times rising by 0 to 30 ms each (a pane gets about 2 views of each
    user). The next chunk starts at a later pane: a run that ends at the end of its input fires
    its open panes at end-of-stream, which are then whole."""
    from samza_dsl import KV

    out = []
    for _ in range(n):
        clock[0] += rng.randint(0, 30)
        out.append(KV(f"u{rng.randint(1, USERS)}", {"page": "/", "ts": clock[0] / 1000.0}))
    clock[0] += WINDOW_MS - clock[0] % WINDOW_MS
    return out


def _load(app: Any, job_dir: Path, views: list[Any]) -> None:
    job = LocalJob(app, {"job.dir": str(job_dir)}, run=False)
    try:
        job.load("views", views)
    finally:
        job.close()


def _panes(app: Any, job_dir: Path) -> list[tuple[str, int]]:
    job = LocalJob(app, {"job.dir": str(job_dir)}, run=False)
    try:
        return [(m.key, m.value) for m in job.messages("counts", since_start=False)]
    finally:
        job.close()


@pytest.mark.parametrize("config", [(), SPILL], ids=["in-memory", "spilled"])
def test_sigkill_with_panes_in_memory_counts_every_view_once(
        tmp_path: Path, config: tuple[str, ...]) -> None:
    """With ``SPILL`` the panes past the cache are written to the store between commits
    (and so to the changelog): a kill then leaves the store past the checkpoint, which the
    restore undoes."""
    app = load_app(APP)
    job_dir = tmp_path / "killed"
    rng = random.Random(SEED)
    clock = [1_700_000_000_000]
    every: list[Any] = []
    kills: list[str] = []
    rounds = 0
    while len(kills) < KILLS:
        rounds += 1
        assert rounds <= KILLS * 3, f"only {len(kills)} kills in {rounds} rounds: {kills}"
        views = _views(rng, CHUNK, clock)
        every.extend(views)
        _load(app, job_dir, views)
        point, kill_after, where = pick_kill(rng)
        code, err = _run(job_dir, point, kill_after, config)
        if code == -signal.SIGKILL:
            kills.append(where)
        else:
            assert code == 0, f"run {rounds} ({where}) exited with {code}:\n{err}"
    code, err = _run(job_dir, None, None, config)
    assert code == 0, err

    whole = tmp_path / "uninterrupted"
    _load(app, whole, every)
    code, err = _run(whole, None, None)
    assert code == 0, err

    truth: collections.Counter[str] = collections.Counter()
    for v in every:
        ms = round(v.value["ts"] * 1000)
        truth[f"{v.key}|{ms - ms % WINDOW_MS}"] += 1
    killed = _panes(app, job_dir)
    wrong = [(pane, count, truth[pane]) for pane, count in killed if count != truth[pane]]
    assert not wrong, f"panes whose count is not their views' (pane, emitted, true): {wrong[:10]}"
    expected = set(_panes(app, whole))
    assert len(expected) > USERS * CHUNK * KILLS // 100  # panes closed all along the input
    assert set(killed) == expected, (
        f"{len(set(killed) - expected)} panes only in the killed job, "
        f"{len(expected - set(killed))} only in the uninterrupted run")
    print(f"{len(kills)} kills ({', '.join(kills)}); {len(every)} views; {len(expected)} panes; "
          f"{len(killed) - len(set(killed))} emitted again after a kill")
