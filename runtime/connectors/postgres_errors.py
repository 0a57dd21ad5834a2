"""What a PostgreSQL driver error becomes: one line that names the table, the database and the
user and says what to do, with no part of a password in it.

Every psycopg error of the PostgreSQL output and tables becomes text in ``driver_error``, which
takes out every fragment of a password the connection string holds (``samza_dsl.config.redact``:
the password, its pieces, its percent-encoded and -decoded forms), whatever the driver put in its
message: a connection string it cannot read quotes the piece it stopped at. A refused login or
access (``refused``: SQLSTATE class 28, 3D000, 42501, or a refused login's words, for which libpq
gives no SQLSTATE) is not an outage: ``refusal`` is its one line, naming the system, the user
and where the password comes from; it is not retried.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from typing import Any

from samza_dsl.config import connection_secrets, redact
from samza_dsl.errors import AccessRefused, ConfigError

__all__ = ["describe_conninfo", "check_conninfo", "driver_error", "refused", "refusal",
           "problem"]


def describe_conninfo(conninfo: str) -> str:
    """The connection string without its password, as errors name it.

    >>> describe_conninfo("host=db port=5432 dbname=shop user=app password=secret")
    'host=db port=5432 dbname=shop user=app'
    """
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(conninfo)
    except Exception:
        return "(an unreadable connection string)"
    return " ".join(f"{k}={parts[k]}" for k in ("host", "hostaddr", "port", "dbname", "user")
                    if parts.get(k))


def check_conninfo(system: str, conninfo: str) -> None:
    """Raise ``ConfigError`` where psycopg cannot read ``conninfo``, in one line that shows no
    part of a password in it (a password with a space left unquoted, a bad percent escape).

    >>> check_conninfo("pg", "host=db user=app password=Wr0ng PW_charlie")
    Traceback (most recent call last):
    ...
    samza_dsl.errors.ConfigError: PostgresSystem('pg'): the connection string (conninfo=) cannot be read: ProgrammingError: missing "=" after "***" in connection info string; ...
    """
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(conninfo)
    except Exception as exc:
        raise ConfigError(
            f"PostgresSystem({system!r}): the connection string (conninfo=) cannot be read: "
            f"{driver_error(exc, conninfo)}; fix it (a value with spaces is quoted: "
            f"password='...'; a URL escapes a '%' in a password as %25)") from None


def _secrets(conninfo: str) -> list[str]:
    """The passwords an error about ``conninfo`` must not show: those in it (read leniently,
    so a string psycopg cannot parse gives them too) and ``PGPASSWORD``'s."""
    from psycopg.conninfo import conninfo_to_dict

    found = connection_secrets(conninfo)
    with contextlib.suppress(Exception):
        parts = conninfo_to_dict(conninfo)
        found += [str(parts[k]) for k in ("password", "sslpassword") if parts.get(k)]
    return [*found, os.environ.get("PGPASSWORD", "")]


def driver_error(exc: BaseException, conninfo: str) -> str:
    """A psycopg error as our errors and log lines show it: its type and first line, with
    every fragment of a password (``_secrets``) as ``***``, whatever the driver put in it.
    Every driver error of this module becomes text here."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
    return redact(line, _secrets(conninfo))


def _login(conninfo: str) -> tuple[str, str, str]:
    """(user, database, where the password comes from) of a connection, as libpq picks them:
    the connection string, else ``PGUSER``/``PGDATABASE``/``PGPASSWORD``, else the password
    file (``PGPASSFILE``, ``~/.pgpass``)."""
    import getpass

    from psycopg.conninfo import conninfo_to_dict

    try:
        parts: dict[str, Any] = conninfo_to_dict(conninfo)
    except Exception:
        parts = {}
    env = os.environ
    user = str(parts.get("user") or env.get("PGUSER") or getpass.getuser())
    dbname = str(parts.get("dbname") or env.get("PGDATABASE") or user)
    passfile = str(parts.get("passfile") or env.get("PGPASSFILE")
                   or os.path.expanduser("~/.pgpass"))
    if parts.get("password") or connection_secrets(conninfo):
        source = "comes from the connection string (PostgresSystem's conninfo=)"
    elif env.get("PGPASSWORD"):
        source = "comes from the environment variable PGPASSWORD"
    elif os.path.isfile(passfile):
        source = f"comes from the password file {passfile}"
    else:
        source = (f"is given nowhere (not in the connection string, nor PGPASSWORD, nor "
                  f"{passfile})")
    return user, dbname, source


#: what the server says when it refuses a login (libpq gives no SQLSTATE for those)
_REFUSED_TEXT = re.compile(r"password authentication failed|no password supplied|"
                           r"role \".*\" does not exist|database \".*\" does not exist|"
                           r"not permitted to log in|permission denied|pg_hba\.conf|"
                           r"authentication failed", re.I)


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the database refusing the job rather than not answering: SQLSTATE
    class 28 (a wrong password, no such role), 3D000 (no such database), 42501 (no
    permission), or a refused login's words."""
    state = getattr(exc, "sqlstate", None)  # foreign: psycopg's errors
    if state:
        return str(state).startswith("28") or state in ("3D000", "42501")
    return bool(_REFUSED_TEXT.search(str(exc)))


def refusal(exc: BaseException, conninfo: str, system: str, where: str,
            needs: str) -> AccessRefused:
    """The one line of a refused login or access (``refused``): the system, the user, the
    database and where the password comes from; never the password."""
    user, dbname, source = _login(conninfo)
    if getattr(exc, "sqlstate", None) == "42501":  # foreign: psycopg's errors
        todo = f"grant user {user!r} {needs}"
    else:
        todo = f"check the user, the database and the password, which {source}"
    return AccessRefused(
        f"{where}: PostgreSQL system {system!r} refused user {user!r} of database {dbname!r}: "
        f"{driver_error(exc, conninfo)}; {todo} (a refusal is not retried)",
        system=system, user=user)


def problem(exc: BaseException, conninfo: str, table: str, columns: Sequence[str]) -> str:
    """What a statement's error says of the table, in one line with what to do: a missing
    table, schema or column, a value that does not fit its column."""
    from psycopg.conninfo import conninfo_to_dict

    said = driver_error(exc, conninfo)
    try:
        conninfo_to_dict(conninfo)
    except Exception:
        return f"the connection string (PostgresSystem's conninfo=) cannot be read: {said}"
    state = str(getattr(exc, "sqlstate", None) or "")  # foreign: psycopg's errors
    dbname = _login(conninfo)[1]
    if state in ("42P01", "3F000"):
        return (f"table {table} does not exist in database {dbname!r} ({said}): create it, "
                f"or check table={table!r}")
    if state == "42703":
        return (f"table {table} in database {dbname!r} lacks a column the output writes "
                f"({said}): add it, or check columns= {list(columns)}")
    if state.startswith(("22", "23")) or state in ("42804", "42846"):
        diag = getattr(exc, "diag", None)  # foreign: psycopg's errors
        at = getattr(diag, "context", None) or ""  # foreign: psycopg's diagnostics
        at = f" ({redact(at.strip().splitlines()[0], _secrets(conninfo))})" if at else ""
        return (f"a value does not fit table {table} in database {dbname!r}: {said}{at}; "
                f"fix the value (columns= {list(columns)}) or the column's type")
    return said
