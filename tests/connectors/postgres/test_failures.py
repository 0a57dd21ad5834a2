"""What a user sees when the PostgreSQL output or table cannot do its work, through the command
line (the job of ``pg_refusal_app.py`` as a subprocess): one line, no traceback, and no part of
a password anywhere (standard output and error, the plan, the status, the job's files).

- a connection string psycopg cannot read quotes the piece of the password it stopped at: the
  line shows ``***`` there (output and table alike);
- a missing table or column, or a value that does not fit its column, names the table and the
  database and says what to do, and no batch's error is reported again as a "Future exception
  was never retrieved";
- a refused login or access (a wrong password, no such role or database, no permission on the
  table) is not an outage: the job stops within seconds, naming the system, the user and where
  the password comes from. A database that does not answer is retried (``test_outage.py``).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from runtime.local.system import LocalJob
from runtime.ops.loader import load_app
from samza_dsl import KV

ROOT = Path(__file__).resolve().parents[3]
APP = f"{Path(__file__).with_name('pg_refusal_app.py')}:app"


def _pieces(password: str) -> list[str]:
    """The password and each piece of it of 3 characters or more, cut at spaces and '%'."""
    return [password, *(p for p in re.split(r"\s+|%", password) if len(p) >= 3)]


def _no_secret(password: str, *texts: str) -> None:
    for text in texts:
        for piece in _pieces(password):
            assert piece not in text, (piece, text[-3000:])


def _files_hold_no_secret(password: str, folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for piece in _pieces(password):
                assert piece.encode() not in data, (piece, path)


def _load(job_dir: Path, conninfo: str, n: int, monkeypatch: pytest.MonkeyPatch,
          **env: str) -> None:
    monkeypatch.setenv("SAMZA_DSL_PG_CONNINFO", conninfo)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    job = LocalJob(load_app(APP), {"job.dir": str(job_dir)}, run=False)
    try:
        job.load("events", [KV(str(i), {"id": i, "name": "x"}) for i in range(n)])
    finally:
        job.close()


def _cli(*args: str, conninfo: str, job_dir: Path, **env: str
         ) -> tuple[int, str, str, float]:
    full = {**os.environ, "SAMZA_DSL_PG_CONNINFO": conninfo, **env}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "runtime.ops.cli", *args, APP, "-c",
                           f"job.dir={job_dir}"], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def _run(job_dir: Path, conninfo: str, **env: str) -> tuple[int, str, str, float]:
    return _cli("run", "-q", "--show", "0", conninfo=conninfo, job_dir=job_dir, **env)


@pytest.mark.parametrize("read", ["0", "1"], ids=["output_table", "remote_table"])
@pytest.mark.parametrize("form", ["space", "percent"])
def test_a_conninfo_that_cannot_be_read_shows_no_part_of_its_password(
        pg_server, read: str, form: str, tmp_path: Path) -> None:
    host = f"host=127.0.0.1 port={pg_server.port} dbname=test user=samza"
    if form == "space":
        password, conninfo = "Wr0ng PW_charlie", f"{host} password=Wr0ng PW_charlie"
        said = 'missing "=" after "***" in connection info string'
    else:
        password = "Wr0ng%ZZPW_delta"
        conninfo = f"postgresql://samza:{password}@127.0.0.1:{pg_server.port}/test"
        said = 'invalid percent-encoded token: "***"'
    code, out, err, _ = _run(tmp_path / "job", conninfo, SAMZA_DSL_PG_READ=read)
    assert code == 2
    assert err == (f"samza-dsl run: error: PostgresSystem('pg'): the connection string "
                   f"(conninfo=) cannot be read: ProgrammingError: {said}; fix it (a value "
                   f"with spaces is quoted: password='...'; a URL escapes a '%' in a password "
                   f"as %25)\n"), err
    _no_secret(password, out, err)


def test_the_plan_the_status_and_the_jobs_files_show_no_password(
        pg, pg_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pg.execute("CREATE TABLE events (id bigint, name text)")
    job_dir = tmp_path / "job"
    _load(job_dir, pg.conninfo, 120, monkeypatch)
    code, out, err, _ = _run(job_dir, pg.conninfo)
    assert code == 0, err
    assert pg.execute("SELECT count(*) FROM events") == [(120,)]
    texts = [out, err]
    for fmt in ("text", "json", "dot", "mermaid"):
        code, out, err, _ = _cli("plan", "--format", fmt, conninfo=pg.conninfo,
                                 job_dir=job_dir)
        assert code == 0, err
        texts += [out, err]
    code, out, err, _ = _cli("status", conninfo=pg.conninfo, job_dir=job_dir)
    assert code == 0, err
    assert "pg-fail" in out
    texts += [out, err, *_job_page(job_dir, pg.conninfo)]
    _no_secret(pg_server.password, *texts)
    _files_hold_no_secret(pg_server.password, job_dir)


def _job_page(job_dir: Path, conninfo: str) -> list[str]:
    """The job page's state, plan and front page of a run of the job (--follow --ui), and what
    the run printed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.ops.cli", "run", APP, "--follow", "-q", "--ui",
         f"127.0.0.1:{port}", "-c", f"job.dir={job_dir}"], cwd=ROOT,
        env={**os.environ, "SAMZA_DSL_PG_CONNINFO": conninfo}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    pages = []
    try:
        deadline = time.monotonic() + 40
        for path in ("/api/state", "/plan.svg", "/"):
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                                timeout=5) as r:
                        page = r.read().decode(errors="replace")
                    if path != "/api/state" or '"plan_ready":true' in page:
                        pages.append(page)
                        break
                    raise OSError("the job is starting")
                except OSError:
                    assert proc.poll() is None, proc.communicate()[1]
                    assert time.monotonic() < deadline, "the job page never answered"
                    time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stream:events" in pages[0] and "event&#45;rows" in pages[1], pages[1][:3000]
    return [*pages, out, err]


@pytest.mark.parametrize("case", ["table", "column", "type"])
def test_a_missing_table_or_column_or_a_value_that_does_not_fit_is_one_line(
        pg, case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"table": "nosuch", "column": "only_id", "type": "typed"}[case]
    pg.execute("CREATE TABLE only_id (id bigint)")
    pg.execute("CREATE TABLE typed (id bigint, name int)")
    job_dir = tmp_path / "job"
    _load(job_dir, pg.conninfo, 400, monkeypatch)  # batches on their way when it fails
    code, out, err, _ = _run(job_dir, pg.conninfo, SAMZA_DSL_PG_TABLE=table)
    where = (f"PostgreSQL output 'event-rows' (table {table} at host=127.0.0.1 "
             f"port={pg.server.port} dbname={pg.name} user=samza) failed in task 'Partition 0'")
    what = {
        "table": f"table nosuch does not exist in database {pg.name!r} (UndefinedTable: "
                 f"relation \"nosuch\" does not exist): create it, or check table='nosuch'",
        "column": f"table only_id in database {pg.name!r} lacks a column the output writes "
                  f"(UndefinedColumn: column \"name\" of relation \"only_id\" does not exist): "
                  f"add it, or check columns= ['id', 'name']",
        "type": f"a value does not fit table typed in database {pg.name!r}: "
                f"InvalidTextRepresentation: invalid input syntax for type integer: \"x\" "
                f"(COPY typed, line 1, column name: \"x\"); fix the value (columns= ['id', "
                f"'name']) or the column's type"}[case]
    assert code == 2
    assert err == f"samza-dsl run: error: {where}: {what}\n", err
    _no_secret(pg.server.password, out, err)


def _login_refused(conninfo: str, user: str, dbname: str, said: str, source: str) -> str:
    return (f"PostgreSQL system 'pg' refused user {user!r} of database {dbname!r}: "
            f"OperationalError: connection failed: connection to server at \"127.0.0.1\", "
            f"port {conninfo.split('port=')[1].split()[0]} failed: FATAL:  {said}; check the "
            f"user, the database and the password, which comes from {source} (a refusal is "
            f"not retried)")


@pytest.mark.parametrize("case", ["password", "PGPASSWORD", "role", "database"])
@pytest.mark.parametrize("read", ["0", "1"], ids=["output_table", "remote_table"])
def test_a_refused_login_stops_the_job_at_once_in_one_line(
        pg, pg_server, case: str, read: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pg.execute("CREATE TABLE events (id bigint, name text)")
    pg.execute("CREATE TABLE people (id text PRIMARY KEY, n int)")
    job_dir = tmp_path / "job"
    _load(job_dir, pg.conninfo, 60, monkeypatch)
    wrong = "Wr0ng-" + pg_server.password
    user, dbname, env = "samza", pg.name, {}
    source = "the connection string (PostgresSystem's conninfo=)"
    said = 'password authentication failed for user "samza"'
    if case == "password":
        conninfo = pg_server.conninfo_for(pg.name, password=wrong)
    elif case == "PGPASSWORD":
        conninfo = f"host=127.0.0.1 port={pg_server.port} dbname={pg.name} user=samza"
        env = {"PGPASSWORD": wrong}
        source = "the environment variable PGPASSWORD"
    elif case == "role":
        user = "nobody"
        conninfo = pg_server.conninfo_for(pg.name, user="nobody", password=wrong)
        said = 'password authentication failed for user "nobody"'
    else:
        dbname = "no_such_db"
        conninfo = pg_server.conninfo_for("no_such_db")
        said = 'database "no_such_db" does not exist'
    code, out, err, took = _run(job_dir, conninfo, SAMZA_DSL_PG_READ=read, **env)
    describe = f"host=127.0.0.1 port={pg_server.port} dbname={dbname} user={user}"
    where = (f"PostgreSQL output 'event-rows' (table events at {describe}), task 'Partition 0'"
             if read == "0" else f"PostgreSQL table people at {describe}")
    assert code == 2
    assert err == (f"samza-dsl run: error: {where}: "
                   f"{_login_refused(conninfo, user, dbname, said, source)}\n"), err
    assert took < 15, f"a refusal is not waited on as an outage ({took:.1f} s)"
    _no_secret(wrong, out, err)
    _no_secret(pg_server.password, out, err)


@pytest.mark.parametrize("read", ["0", "1"], ids=["output_table", "remote_table"])
def test_no_permission_on_the_table_stops_the_job_at_once_in_one_line(
        pg, pg_server, read: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pg.execute("CREATE TABLE events (id bigint, name text)")
    pg.execute("CREATE TABLE people (id text PRIMARY KEY, n int)")
    pg.execute("CREATE TABLE samza_dsl_positions (job text, output text, task text, "
               "stream text, part int, last_offset bigint, checkpoint bigint, "
               "PRIMARY KEY (job, output, task, stream, part))")
    role = f"clerk_{pg.name}"
    secret = "Cl3rk-" + pg_server.password
    pg.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{secret}'")
    pg.execute(f"GRANT ALL ON samza_dsl_positions TO {role}")
    pg.execute(f"GRANT CREATE ON SCHEMA public TO {role}")  # the job may make its tables
    job_dir = tmp_path / "job"
    _load(job_dir, pg.conninfo, 60, monkeypatch)
    conninfo = pg_server.conninfo_for(pg.name, user=role, password=secret)
    code, out, err, took = _run(job_dir, conninfo, SAMZA_DSL_PG_READ=read)
    describe = f"host=127.0.0.1 port={pg_server.port} dbname={pg.name} user={role}"
    if read == "0":
        where = f"PostgreSQL output 'event-rows' (table events at {describe}), task 'Partition 0'"
        table, needs = "events", ("INSERT on table events, and CREATE on its database's "
                                  "public schema (the positions table samza_dsl_positions)")
    else:
        where, table, needs = f"PostgreSQL table people at {describe}", "people", \
            "SELECT on table people"
    assert code == 2
    assert err == (f"samza-dsl run: error: {where}: PostgreSQL system 'pg' refused user "
                   f"{role!r} of database {pg.name!r}: InsufficientPrivilege: permission "
                   f"denied for table {table}; grant user {role!r} {needs} (a refusal is not "
                   f"retried)\n"), err
    assert took < 15, f"a refusal is not waited on as an outage ({took:.1f} s)"
    _no_secret(secret, out, err)
