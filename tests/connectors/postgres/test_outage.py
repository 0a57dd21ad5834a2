"""A database that goes away: the job of ``pg_app.py`` (a subprocess) retries a lost connection
within its bound and goes on, losing and repeating nothing; away for longer, the job stops with
one line naming the output, the connection and what failed, and a run once the database is
back writes the rest, each row once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.local.system import LocalJob
from runtime.ops.loader import load_app
from samza_dsl import KV
from samza_dsl.testing.postgres import PostgresServer

ROOT = Path(__file__).resolve().parents[3]
APP = f"{Path(__file__).with_name('pg_app.py')}:app"


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    with PostgresServer("outage") as s:  # its own: this test stops it
        s.execute("CREATE TABLE events (id bigint, task int)")
        yield s


def _start(job_dir: Path, conninfo: str, retry: float, follow: bool) -> subprocess.Popen[str]:
    env = dict(os.environ, SAMZA_DSL_PG_CONNINFO=conninfo, SAMZA_DSL_PG_RETRY=str(retry))
    env.pop("SAMZA_DSL_CRASH_AT", None)
    cmd = [sys.executable, "-m", "runtime.ops.cli", "run", APP, "-c", f"job.dir={job_dir}",
           "-c", "task.commit.ms=50", "-q", "--show", "0"] + (["--follow"] if follow else [])
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _load(job_dir: Path, start: int, n: int) -> None:
    job = LocalJob(load_app(APP), {"job.dir": str(job_dir)}, run=False)
    try:
        job.load("events", [KV(str(i), {"id": i}) for i in range(start, start + n)])
    finally:
        job.close()


def _rows(server: PostgresServer) -> int:
    return int(server.execute("SELECT count(*) FROM events")[0][0])


def _wait_rows(server: PostgresServer, n: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _rows(server) < n:
        assert time.monotonic() < deadline, f"{_rows(server)} rows, expected {n}"
        time.sleep(0.05)


def _exactly_once(server: PostgresServer, loaded: int) -> None:
    counts = dict(server.execute("SELECT id, count(*) FROM events GROUP BY id"))
    assert set(counts) == {i for i in range(loaded) if i % 10 != 9}
    assert max(counts.values()) == 1


def test_a_short_outage_is_retried_and_the_job_goes_on(server, tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    _load(job_dir, 0, 2000)
    proc = _start(job_dir, server.conninfo, retry=30, follow=True)
    try:
        _wait_rows(server, 1800)
        with server.outage():
            _load(job_dir, 2000, 2000)  # input goes on arriving while the database is away
            time.sleep(1.5)
        _wait_rows(server, 3600)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    _exactly_once(server, 4000)


def test_a_long_outage_stops_the_job_with_one_line_and_loses_nothing(
        server, tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    _load(job_dir, 0, 1000)
    proc = _start(job_dir, server.conninfo, retry=1.5, follow=True)
    try:
        _wait_rows(server, 900)
        server.stop()
        _load(job_dir, 1000, 1000)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode not in (0, None), err
    lines = [line for line in err.splitlines() if "did not answer" in line]
    assert len(lines) == 1, err
    line = lines[0]
    assert "PostgreSQL output 'event-rows'" in line and f"port={server.port}" in line, line
    assert "1.5 s" in line, line
    server.start()
    done = _start(job_dir, server.conninfo, retry=30, follow=False)
    _, err = done.communicate(timeout=60)
    assert done.returncode == 0, err
    _exactly_once(server, 2000)
