"""An Iceberg SQL catalog on PostgreSQL that refuses the job's login: the job stops within
seconds with one line naming the system, the user and where the password comes from, and no
part of the password anywhere (a refusal is not an outage, which is retried). The same catalog
with the right password takes the job's rows."""

from __future__ import annotations

import os
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
APP = f"{Path(__file__).with_name('pg_catalog_app.py')}:app"


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer("catalog") as s:
        yield s


def _run(tmp_path: Path, uri: str, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[int, str, str, float]:
    env = {"SAMZA_DSL_ICEBERG_URI": uri, "SAMZA_DSL_ICEBERG_WH": str(tmp_path / "warehouse")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    job = LocalJob(load_app(APP), {"job.dir": str(tmp_path / "job")}, run=False)
    try:
        job.load("events", [KV(str(i), {"id": i}) for i in range(20)])
    finally:
        job.close()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "runtime.ops.cli", "run", APP, "-q", "--show",
                           "0", "-c", f"job.dir={tmp_path / 'job'}"], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def test_a_catalog_that_refuses_the_login_stops_the_job_at_once_in_one_line(
        server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "Wr0ng-" + server.password
    base = f"postgresql+psycopg://samza:{{}}@127.0.0.1:{server.port}/catalog"
    code, out, err, took = _run(tmp_path / "wrong", base.format(wrong), monkeypatch)
    assert code == 2
    assert err == (
        f"samza-dsl run: error: Iceberg output 'event-rows' (table lake.events, catalog 'lake' "
        f"at postgresql+psycopg://samza:***@127.0.0.1:{server.port}/catalog), task "
        f"'Partition 0', open: the catalog's database refused user 'samza' of Iceberg system "
        f"'lake': OperationalError: connection failed: connection to server at \"127.0.0.1\", "
        f"port {server.port} failed: FATAL:  password authentication failed for user "
        f"\"samza\"; check the user and the password, which comes from the catalog URI "
        f"(IcebergSystem's catalog_uri=) (a refusal is not retried)\n"), err
    assert took < 15, f"a refusal is not waited on as an outage ({took:.1f} s)"
    for piece in (wrong, "Wr0ng", server.password):
        assert piece not in out + err, piece
    code, out, err, _ = _run(tmp_path / "right", base.format(server.password), monkeypatch)
    assert code == 0, err
    assert "event-rows: 20 message(s) to Iceberg table lake.events" in out, out
    assert server.password not in out + err
