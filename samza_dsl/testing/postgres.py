"""A PostgreSQL server of its own for a test: ``initdb`` in a temporary folder, ``postgres`` on a
free port of 127.0.0.1 (its socket in that folder too), one database made, all removed after.

It runs the server binaries of the machine (Debian's ``postgresql`` package puts them in
``/usr/lib/postgresql/<version>/bin``; ``SAMZA_DSL_PG_BIN`` names another folder). PostgreSQL
refuses to run as root: under root the cluster belongs to the unprivileged ``postgres`` user
(which Debian's package makes) and the server runs as that user through ``runuser``; the test
connects over TCP either way. A missing server is an error, not a skip.

The server asks for a password (``scram-sha-256``, as a production server does): its superuser
``samza`` gets a random one at ``initdb`` (``password``), and ``conninfo`` holds it. A wrong
password is refused as it would be in production (``conninfo_for(dbname, password=...)`` makes
one to try).

``stop()`` and ``start()`` again keep the data: a test takes the database away and brings it
back (``outage``).

Example (a pytest fixture of a test suite)::

    import pytest
    from samza_dsl.testing.postgres import PostgresServer

    @pytest.fixture(scope="session")
    def postgres():
        with PostgresServer() as server:
            yield server    # server.conninfo: "host=127.0.0.1 port=... dbname=test user=samza password=..."
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

__all__ = ["PostgresServer", "find_bin"]

#: the superuser the cluster is made with (the tests' connections log in as it)
SUPERUSER = "samza"


def find_bin() -> str:
    """The folder of the PostgreSQL server binaries: ``SAMZA_DSL_PG_BIN``, else the newest of
    ``/usr/lib/postgresql/*/bin``, else where ``initdb`` is on the PATH.

    Raises:
        RuntimeError: none is found (install Debian's ``postgresql``; ``./dev setup`` does).
    """
    given = os.environ.get("SAMZA_DSL_PG_BIN")
    if given:
        if not os.path.exists(os.path.join(given, "initdb")):
            raise RuntimeError(f"SAMZA_DSL_PG_BIN={given!r} has no initdb")
        return given
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if found:
        best = max(found, key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
        return os.path.dirname(best)
    which = shutil.which("initdb")
    if which:
        return os.path.dirname(which)
    raise RuntimeError("no PostgreSQL server found (initdb under /usr/lib/postgresql/*/bin or "
                       "on the PATH): install it with 'apt-get install postgresql' (./dev "
                       "setup does), or set SAMZA_DSL_PG_BIN to its bin folder")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """One PostgreSQL server in a temporary folder, with database ``dbname``.

    Args:
        dbname: The database made for the test.
        settings: Server settings (``-c name=value``), over the defaults: ``fsync=off`` and
            ``synchronous_commit=off`` (the server is never crashed in a test: the job is) and
            ``max_connections=100``.
        run_as: The user the server runs as under root (default ``postgres``).
    """

    def __init__(self, dbname: str = "test", *, settings: Mapping[str, str] | None = None,
                 run_as: str = "postgres") -> None:
        self.bin = find_bin()
        self.dbname = dbname
        self.settings = {"fsync": "off", "synchronous_commit": "off",
                         "full_page_writes": "off", "max_connections": "100",
                         **(settings or {})}
        self.root = os.geteuid() == 0
        self.run_as = run_as
        self.folder = ""
        self.port = 0
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen[bytes] | None = None
        #: the superuser's password (``SUPERUSER``), set at ``initdb``
        self.password = "pw-" + secrets.token_urlsafe(12)

    # -- commands -----------------------------------------------------------------------------

    def _cmd(self, args: Sequence[str]) -> list[str]:
        cmd = [os.path.join(self.bin, args[0]), *args[1:]]
        return ["runuser", "-u", self.run_as, "--", *cmd] if self.root else cmd

    @property
    def data(self) -> str:
        return os.path.join(self.folder, "data")

    @property
    def log(self) -> str:
        return os.path.join(self.folder, "server.log")

    def conninfo_for(self, dbname: str, *, user: str = SUPERUSER,
                     password: str | None = None) -> str:
        """The connection string of database ``dbname`` on this server, logging in as
        ``user`` (the superuser by default) with ``password`` (the superuser's by default)."""
        password = self.password if password is None and user == SUPERUSER else password
        secret = "" if password is None else \
            " password='" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return (f"host={self.host} port={self.port} dbname={dbname} user={user}{secret} "
                f"connect_timeout=5")

    @property
    def conninfo(self) -> str:
        """The connection string of the test's database."""
        return self.conninfo_for(self.dbname)

    # -- life ---------------------------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        try:
            self.create()
            self.start()
            self.create_database(self.dbname)
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.remove()

    def create(self) -> None:
        """``initdb`` into a new temporary folder."""
        self.folder = tempfile.mkdtemp(prefix="samza-dsl-pg-")
        if self.root:
            try:
                user = pwd.getpwnam(self.run_as)
            except KeyError:
                raise RuntimeError(f"running as root, PostgreSQL needs an unprivileged user to "
                                   f"run as: {self.run_as!r} does not exist (Debian's "
                                   f"postgresql package makes it)") from None
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        os.chmod(self.folder, 0o700)
        pwfile = os.path.join(self.folder, "pwfile")
        with open(os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(self.password + "\n")
        if self.root:
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        try:
            done = subprocess.run(
                self._cmd(["initdb", "-D", self.data, "-U", SUPERUSER,
                           "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8",
                           "--locale=C", "--no-sync"]),
                capture_output=True, text=True)
        finally:
            os.unlink(pwfile)
        if done.returncode != 0:
            raise RuntimeError(f"initdb in {self.folder} failed (exit {done.returncode}): "
                               f"{done.stderr.strip()[-2000:]}")

    def start(self, port: int | None = None) -> None:
        """Start the server (on ``port``, else the port it had, else a free one); returns once
        it takes connections."""
        self.port = port or self.port or _free_port()
        args = ["postgres", "-D", self.data, "-p", str(self.port), "-h", self.host,
                "-k", self.folder]
        for k, v in self.settings.items():
            args += ["-c", f"{k}={v}"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self._cmd(args), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self._wait_ready(30.0)

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres on port {self.port} exited "
                                   f"({self.proc.returncode}); its log ends:\n{self._tail()}")
            try:
                with psycopg.connect(self.conninfo_for("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres on port {self.port} did not take "
                                       f"connections within {timeout} s; its log ends:\n"
                                       f"{self._tail()}") from None
                time.sleep(0.05)

    def _tail(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the server (fast shutdown: connections are cut); the data stays."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        subprocess.run(self._cmd(["pg_ctl", "stop", "-D", self.data, "-m", "fast", "-w",
                                  "-t", "30"]), capture_output=True)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The server is down inside the block, and back (same port, same data) after it."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def remove(self) -> None:
        """Stop the server and delete its folder."""
        try:
            self.stop()
        finally:
            if self.folder:
                shutil.rmtree(self.folder, ignore_errors=True)

    # -- SQL ----------------------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """Make database ``name``; its connection string."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.conninfo_for("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.conninfo_for(name)

    def execute(self, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement in the test's database (committed); its rows, if any."""
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            cur = conn.execute(query.encode(), params)
            return list(cur.fetchall()) if cur.description is not None else []
