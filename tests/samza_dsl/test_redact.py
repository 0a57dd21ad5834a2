"""``samza_dsl.config.redact``: what a driver's message may hold of a password in a connection
string, whatever its form, comes out as ``***``; and the PostgreSQL connector's one place where
driver errors become text uses it (the password of the connection string, of PGPASSWORD)."""

from __future__ import annotations

import pytest

from runtime.connectors.postgres_errors import driver_error
from samza_dsl.config import connection_secrets, redact


@pytest.mark.parametrize("conninfo, password", [
    ("host=db user=app password=Wr0ng PW_charlie", "Wr0ng PW_charlie"),
    ("host=db password = 'two words\\' here' user=app", "two words' here"),
    ("postgresql://app:Wr0ng%ZZPW_delta@db:5432/shop", "Wr0ng%ZZPW_delta"),
    ("postgresql+psycopg://app:p%40ss%20word@db/shop", "p%40ss%20word"),
    ("postgresql://app@db/shop?sslmode=off&password=qu3ry_pw", "qu3ry_pw"),
])
def test_the_password_is_found_in_any_form_of_connection_string(conninfo: str,
                                                                 password: str) -> None:
    assert connection_secrets(conninfo) == [password]


def test_no_fragment_of_a_password_survives() -> None:
    secrets = connection_secrets("postgresql://app:p%40ss%20word@db/shop")
    said = ('bad token "p%40ss%20word", decoded "p@ss word", re-encoded "p%40ss+word", a piece '
            '"word" and another "p@ss"')
    assert redact(said, secrets) == ('bad token "***", decoded "***", re-encoded "***", a '
                                     'piece "***" and another "***"')
    # a piece shorter than 3 characters is no secret of its own
    assert redact("at 12 of ab", ["ab 12 Wr0ngPW"]) == "at 12 of ab"


def test_driver_errors_show_no_password_of_the_connection_string_or_pgpassword(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", "env-Secr3t")
    error = RuntimeError('FATAL: user "app" with "Wr0ng" and "env-Secr3t"\nsecond line')
    assert driver_error(error, "host=db user=app password=Wr0ng PW_charlie") == \
        'RuntimeError: FATAL: user "app" with "***" and "***"'
