"""One PostgreSQL server for the PostgreSQL connector's tests (``samza_dsl.testing.postgres``):
started once, each test given a database of its own. A missing server fails the tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from samza_dsl.testing.postgres import PostgresServer

_names = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


class Database:
    """A database of one test on the shared server."""

    def __init__(self, server: PostgresServer, name: str) -> None:
        self.server = server
        self.name = name
        self.conninfo = server.create_database(name)

    def execute(self, query: str, params: object = None) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            cur = conn.execute(query.encode(), params)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description is not None else []


@pytest.fixture
def pg(pg_server: PostgresServer) -> Database:
    return Database(pg_server, f"t{next(_names)}")
