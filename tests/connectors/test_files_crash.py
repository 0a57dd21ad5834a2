"""Files outputs under SIGKILL, for real: the job of ``files_app.py`` runs as a subprocess on the
embedded local system and is killed at every commit point of ``runtime.engine.faults`` (those of a
task with sinks included: prepared, checkpointed, committed) and at random times (seeded).
After each kill more input arrives and the job restarts; a last run finishes. Meanwhile a reader
polls both folders and reads every file it sees whole. Then:

- every input id is in the committed files of each output exactly once;
- no temporary file is left, and no file the reader saw ever changed or went away;
- the reader never saw a partial file (every one it saw read whole, as Parquet or as lines).
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
import pyarrow.parquet as pq

from runtime.engine.faults import POINTS, SINK_POINTS
from runtime.local.system import LocalJob
from runtime.ops.loader import load_app
from tests.proc_helpers import finish

ROOT = Path(__file__).resolve().parents[2]
APP = f"{Path(__file__).with_name('files_app.py')}:app"
KILLS = int(os.environ.get("SAMZA_DSL_FILES_KILLS", "14"))
SEED = int(os.environ.get("SAMZA_DSL_FILES_SEED", "20260311"))
CHUNK = 800


def _run(job_dir: Path, out: Path, crash_at: str | None,
         kill_after: float | None) -> tuple[int, str]:
    env = dict(os.environ)
    env.pop("SAMZA_DSL_CRASH_AT", None)
    env["SAMZA_DSL_FILES_OUT"] = str(out)
    if crash_at:
        env["SAMZA_DSL_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "runtime.ops.cli", "run", APP, "-c", f"job.dir={job_dir}",
           "-c", "task.commit.ms=20", "-q", "--show", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return finish(proc, kill_after, 120)


def _read(path: Path) -> list[int]:
    """The ids of a committed file, read whole (a partial file raises)."""
    if path.suffix == ".parquet":
        return pq.read_table(path).column("id").to_pylist()
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"{path.name} does not end with a whole line"
    return [msgspec.json.decode(line)["id"] for line in data.splitlines()]


class Reader(threading.Thread):
    """Polls the folders; reads each file it sees whole, once, and checks it stays as seen."""

    def __init__(self, folders: list[Path]) -> None:
        super().__init__(daemon=True)
        self.folders = folders
        self.seen: dict[Path, tuple[int, float]] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.005):
            self.poll()

    def poll(self) -> None:
        for folder in self.folders:
            if not folder.exists():
                continue
            for name in os.listdir(folder):
                if name.startswith("."):
                    continue  # hidden: a file being written
                path = folder / name
                try:
                    st = path.stat()
                except FileNotFoundError:
                    self.errors.append(f"{name} went away")
                    continue
                before = self.seen.get(path)
                if before is None:
                    try:
                        _read(path)
                    except Exception as exc:  # noqa: BLE001 - any failure is a partial file
                        self.errors.append(f"{name} read partial: {exc!r}")
                    self.seen[path] = (st.st_size, st.st_mtime)
                elif before != (st.st_size, st.st_mtime):
                    self.errors.append(f"{name} changed after it was seen")


def _pick(rng: random.Random) -> tuple[str | None, float | None, str]:
    if rng.random() < 0.25:
        after = rng.uniform(0.3, 1.2)
        return None, after, f"after {after:.2f}s"
    point = rng.choice(POINTS + SINK_POINTS)
    point = f"{point}:{rng.randint(1, 2 if point == 'batch' else 6)}"
    return point, None, point


def test_sigkill_never_loses_or_duplicates_a_row_nor_shows_a_partial_file(
        tmp_path: Path) -> None:
    from samza_dsl import KV

    app = load_app(APP)
    job_dir, out = tmp_path / "job", tmp_path / "out"
    config = {"job.dir": str(job_dir)}
    rng = random.Random(SEED)
    reader = Reader([out / "rows", out / "lines"])
    reader.start()
    kills: list[str] = []
    loaded = 0
    rounds = 0
    # every commit point a task with sinks reaches first, then random ones
    planned = [f"{p}:{n}" for p in SINK_POINTS for n in (1, 3)] + [
        "batch:1", "commit.start:2", "commit.outputs-flushed:2", "commit.done:2"]
    try:
        while len(kills) < KILLS:
            rounds += 1
            assert rounds <= KILLS * 3, f"only {len(kills)} kills in {rounds} rounds: {kills}"
            job = LocalJob(app, config, run=False)
            try:
                job.load("events", [KV(str(i), {"id": i, "pad": "x" * 40})
                                    for i in range(loaded, loaded + CHUNK)])
            finally:
                job.close()
            loaded += CHUNK
            if planned:
                point, after = planned.pop(0), None
                where = point
            else:
                point, after, where = _pick(rng)
            code, err = _run(job_dir, out, point, after)
            if code == -signal.SIGKILL:
                kills.append(where)
            else:
                assert code == 0, f"run {rounds} ({where}) exited with {code}:\n{err}"
        code, err = _run(job_dir, out, None, None)
        assert code == 0, err
    finally:
        reader.stop.set()
        reader.join()
    reader.poll()
    assert not reader.errors, reader.errors[:10]
    for folder in ("rows", "lines"):
        names = os.listdir(out / folder)
        assert not [n for n in names if n.startswith(".")], f"temporary files left: {names}"
        counts: collections.Counter[int] = collections.Counter()
        for name in names:
            counts.update(_read(out / folder / name))
        missing = set(range(loaded)) - set(counts)
        twice = {i: n for i, n in counts.items() if n > 1}
        assert not missing, f"{folder}: ids {sorted(missing)[:10]} never written"
        assert not twice, f"{folder}: ids written more than once: {dict(list(twice.items())[:10])}"
        assert len(counts) == loaded
    print(f"{len(kills)} kills ({', '.join(kills)}); {loaded} events; "
          f"{len(reader.seen)} files seen by the reader")


