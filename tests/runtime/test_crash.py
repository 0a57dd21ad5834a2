"""Crash safety, for real: the ReadWrite counter runs as a subprocess on the embedded local
system and is killed with SIGKILL at random points (seeded): at a random time, after a processed
batch whose outputs are not written yet, and inside commits (before anything is flushed, after
the outputs are flushed, after the stores' changelogs are durable, and between the stores'
commit and the offsets). After each kill more input arrives and the job restarts; a last run
finishes. Then:

- every input message's effect is in the outputs at least once: each id's emitted counts cover
  1..its true count;
- the table counts are never below the true counts;
- nothing is corrupted: every record of the log decodes, every store opens, and the final run
  used its stores as they were (host affinity) and checkpointed every input to its end.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runtime.engine.faults import POINTS
from runtime.local.state import LocalCheckpoints
from runtime.local.system import LocalJob, task_dir
from runtime.ops.loader import load_app
from runtime.state.lmdb_store import LmdbStore
from tests.proc_helpers import finish

ROOT = Path(__file__).resolve().parents[2]
APP = f"{ROOT / 'examples' / 'readwrite_counter.py'}:app"
KILLS = int(os.environ.get("SAMZA_DSL_CRASH_KILLS", "22"))
SEED = int(os.environ.get("SAMZA_DSL_CRASH_SEED", "20261121"))
IDS = 150
CHUNK = 3000


def _run(job_dir: Path, crash_at: str | None, kill_after: float | None,
         app: str = APP, config: tuple[str, ...] = ()) -> tuple[int, str]:
    """Run ``app`` on the local system in a subprocess, killed at ``crash_at`` or after
    ``kill_after`` s, with ``config`` (``key=value`` each) on top; its exit code and stderr."""
    env = dict(os.environ)
    env.pop("SAMZA_DSL_CRASH_AT", None)
    if crash_at:
        env["SAMZA_DSL_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "runtime.ops.cli", "run", app, "-c", f"job.dir={job_dir}",
           "-c", "task.commit.ms=25", "-q", "--show", "0"]
    for item in config:
        cmd += ["-c", item]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return finish(proc, kill_after, 120)


def pick_kill(rng: random.Random) -> tuple[str | None, float | None, str]:
    """Where the next run is killed: (a fault point ``name:n``, or None and a time in seconds),
    and the words for it. Every task commits at least once (at the end), and there are 4."""
    if rng.random() < 0.3:
        kill_after = rng.uniform(0.2, 0.8)
        return None, kill_after, f"after {kill_after:.2f}s"
    point = rng.choice(POINTS)
    point = f"{point}:{rng.randint(1, 2 if point == 'batch' else 4)}"
    return point, None, point


def _events(rng: random.Random, n: int) -> list[Any]:
    from samza_dsl import KV

    return [KV(str(i), {"id": i, "pad": "x" * 100})
            for i in (rng.randint(1, IDS) for _ in range(n))]


def test_sigkill_at_random_points_loses_nothing(tmp_path: Path) -> None:
    app = load_app(APP)
    job_dir = tmp_path / "job"
    config = {"job.dir": str(job_dir)}
    rng = random.Random(SEED)
    truth: collections.Counter[str] = collections.Counter()
    kills: list[str] = []
    completed = 0
    rounds = 0
    while len(kills) < KILLS:
        rounds += 1
        assert rounds <= KILLS * 3, f"only {len(kills)} kills in {rounds} rounds: {kills}"
        events = _events(rng, CHUNK)
        job = LocalJob(app, config, run=False)
        try:
            job.load("events", events)
        finally:
            job.close()
        truth.update(e.key for e in events)
        point, kill_after, where = pick_kill(rng)
        code, err = _run(job_dir, point, kill_after)
        if code == -signal.SIGKILL:
            kills.append(where)
        elif code == 0:
            completed += 1  # the run ended before the kill point
        else:
            raise AssertionError(f"run {rounds} ({where}) exited with {code}:\n{err}")

    code, err = _run(job_dir, None, None)
    assert code == 0, err

    job = LocalJob(app, config, run=False)
    try:
        outputs = job.messages("counts", since_start=False)  # decodes every record
        emitted: dict[str, set[int]] = collections.defaultdict(set)
        for m in outputs:
            emitted[m.key].add(m.value)
        for key, count in truth.items():
            missing = set(range(1, count + 1)) - emitted[key]
            assert not missing, f"id {key}: counts {sorted(missing)[:10]} never emitted"
        assert len(outputs) >= sum(truth.values())

        log = job.log_of("local")
        checkpoints = LocalCheckpoints(log, job.job_name).tasks()
        offsets = {ssp.partition: off for cps in checkpoints.values()
                   for ssp, off in cps.items() if ssp.stream_id == "events"}
        assert offsets == {p: log.end_offset("events", p) - 1 for p in range(4)}

        table: dict[str, int] = {}
        for task in job.job.tasks:
            store = LmdbStore.open(job_dir / "stores" / "counts" / task_dir(task.name),
                                   name="counts", task=task.name, key_encode=str.encode,
                                   key_decode=bytes.decode, value_encode=_json_encode,
                                   value_decode=_json_decode)
            try:
                for key, value in store.all():
                    assert key not in table, f"id {key} in two tasks' stores"
                    table[key] = value
            finally:
                store.close()
        below = {k: (table.get(k), c) for k, c in truth.items() if table.get(k, 0) < c}
        assert not below, f"table counts below the true counts: {below}"
    finally:
        job.close()
    print(f"{len(kills)} kills ({', '.join(kills)}); {completed} runs ended before their kill "
          f"point; {sum(truth.values())} events; {len(outputs)} outputs")


def _json_encode(value: Any) -> bytes:
    import msgspec

    return msgspec.json.encode(value)


def _json_decode(data: bytes) -> Any:
    import msgspec

    return msgspec.json.decode(data)


def test_final_run_after_kills_uses_stores_as_they_are(tmp_path: Path) -> None:
    """A kill between the stores' commit and the offsets leaves the stores ahead of the
    checkpoint: the next run rebuilds them from the changelog; a clean run after that finds
    them as the checkpoint says and replays nothing."""
    app = load_app(APP)
    job_dir = tmp_path / "job"
    config = {"job.dir": str(job_dir)}
    rng = random.Random(SEED + 1)
    started = time.monotonic()
    for crash_at in (None, "commit.stores-committed:1"):
        job = LocalJob(app, config, run=False)
        job.load("events", _events(rng, 10000))
        job.close()
        code, err = _run(job_dir, crash_at, None)
        assert code == (-signal.SIGKILL if crash_at else 0), err
    from runtime import LocalRunner

    runner = LocalRunner(app, config).run()
    try:
        modes = collections.Counter(i["mode"] for i in runner.job.state.restores.values())
        assert modes == {"rebuilt": 1, "host-affinity": 3}, modes
        replayed = [i["entries_replayed"] for i in runner.job.state.restores.values()
                    if i["mode"] == "rebuilt"]
        assert replayed[0] > 0
    finally:
        runner.close()
    again = LocalRunner(app, config).run()
    try:
        assert {i["mode"] for i in again.job.state.restores.values()} == {"host-affinity"}
        assert sum(i["entries_replayed"] for i in again.job.state.restores.values()) == 0
    finally:
        again.close()
    assert time.monotonic() - started < 60
