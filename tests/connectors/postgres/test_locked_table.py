"""A table another session holds (``LOCK TABLE ... IN ACCESS EXCLUSIVE MODE``): the COPY of the
job of ``pg_app.py`` (a subprocess) waits on the lock, the stall watch of a bounded run stops it
naming the sink each task waits in, and a stop (SIGTERM) of a run that follows its input ends
it past ``task.shutdown.ms``: the sink's abort cancels the statement that waits, and no thread
keeps the process. Nothing is committed; once the lock is let go, a rerun writes each row once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runtime.local.system import LocalJob
from runtime.ops.loader import load_app
from samza_dsl import KV

ROOT = Path(__file__).resolve().parents[3]
APP = f"{Path(__file__).with_name('pg_app.py')}:app"
#: what a test waits for a process that should end at most (it fails, never hangs)
LIMIT = 20


def _run(job_dir: Path, conninfo: str, *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ, SAMZA_DSL_PG_CONNINFO=conninfo)
    env.pop("SAMZA_DSL_CRASH_AT", None)
    cmd = [sys.executable, "-m", "runtime.ops.cli", "run", APP, "-c", f"job.dir={job_dir}",
           "-c", "task.commit.ms=50", "-q", "--show", "0", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _end(proc: subprocess.Popen[str]) -> tuple[float, str]:
    start = time.monotonic()
    try:
        _, err = proc.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"the run did not end within {LIMIT} s:\n{err}") from None
    return time.monotonic() - start, err


def _waiting_on_lock(pg: Any) -> bool:
    return bool(pg.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")[0][0])


@pytest.mark.parametrize("how", ["stall", "sigterm"])
def test_a_run_whose_table_another_session_locks_ends_and_commits_nothing(
        pg: Any, tmp_path: Path, how: str) -> None:
    pg.execute("CREATE TABLE events (id bigint, task int)")
    job_dir = tmp_path / "job"
    job = LocalJob(load_app(APP), {"job.dir": str(job_dir)}, run=False)
    try:
        job.load("events", [KV(str(i), {"id": i}) for i in range(200)])
    finally:
        job.close()
    lock = psycopg.connect(pg.conninfo)
    try:
        lock.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        if how == "stall":
            proc = _run(job_dir, pg.conninfo, "-c", "job.bounded.stall.ms=2000")
            took, err = _end(proc)
            assert proc.returncode == 2, err
            line = err.rstrip().splitlines()[-1]
            assert line.startswith("samza-dsl run: error: the run stopped: it made no progress "
                                   "for "), err
            assert "(job.bounded.stall.ms=2000)" in line
            assert "it waits in PostgresSink.prepare()" in line, line
        else:
            proc = _run(job_dir, pg.conninfo, "-c", "task.shutdown.ms=1500", "--follow")
            deadline = time.monotonic() + LIMIT
            while not _waiting_on_lock(pg):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the COPY never waited on the lock"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            took, err = _end(proc)
            assert proc.returncode == 143, err
            assert took < 1.5 + 4, f"took {took:.1f} s:\n{err}"
            line = err.rstrip().splitlines()[-1]
            assert line.startswith("samza-dsl run: interrupted: job 'pg-crash' did not stop "
                                   "within task.shutdown.ms=1500 of the stop (SIGTERM)"), err
        assert "Traceback" not in err and "never retrieved" not in err, err
        assert "trying again" not in err, err  # a statement cancelled by the abort stays so
    finally:
        lock.close()
    assert pg.execute("SELECT count(*) FROM events") == [(0,)]
    again = _run(job_dir, pg.conninfo)
    _, err = _end(again)
    assert again.returncode == 0, err
    counts = dict(pg.execute("SELECT id, count(*) FROM events GROUP BY id"))
    assert set(counts) == {i for i in range(200) if i % 10 != 9}
    assert max(counts.values()) == 1
