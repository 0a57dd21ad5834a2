"""A pass's plan as text for Spark SQL, and its schemas as Python objects: fewer calls into the JVM
while the driver builds a plan.

Every call of PySpark's Column API (``F.col``, ``F.expr``, ``Column.isin``...) is one or more
round trips to the JVM, and in PySpark 4 each one also records its Python call site in the JVM
(``spark.python.sql.dataFrameDebugging.enabled``, on by default): five to eight round trips a
call. A schema given as DDL text is parsed by the JVM, with one round trip for each part of the
parser's dotted class name. A pass written the plain way made about 280 calls before its first
task ran, a quarter of a second on two cores. Written as one SQL query (``spark.sql`` over the
DataFrames it reads, as ``{name}`` arguments) and with schemas built in Python, the same plan
takes a few.

- ``sql_string(s)``: a string literal of Spark SQL;
- ``quoted(s)``: a column's name, quoted for SQL text;
- ``struct_type(ddl)``: the ``StructType`` of a DDL schema of plain columns (``name type, ...``),
  built in Python, or the DDL itself for a type it does not know (Spark then parses it).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["sql_string", "quoted", "struct_type"]


def sql_string(s: str) -> str:
    r"""A Spark SQL string literal of ``s``: in single quotes, a backslash and a quote escaped
    with a backslash (Spark's default string syntax).

    >>> print(sql_string("it's"), sql_string("a\\b"))
    'it\'s' 'a\\b'
    """
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quoted(s: str) -> str:
    """A column's name quoted for SQL text.

    >>> quoted("ts"), quoted("a`b")
    ('`ts`', '`a``b`')
    """
    return "`" + s.replace("`", "``") + "`"


#: the DDL type names ``struct_type`` builds (each a ``pyspark.sql.types`` class's name)
_TYPES = {"int": "Integer", "integer": "Integer", "bigint": "Long", "long": "Long",
          "smallint": "Short", "short": "Short", "tinyint": "Byte", "byte": "Byte",
          "string": "String", "binary": "Binary", "double": "Double", "float": "Float",
          "real": "Float", "boolean": "Boolean", "date": "Date", "timestamp": "Timestamp"}


@functools.lru_cache(maxsize=256)
def struct_type(ddl: str) -> Any:
    """The ``StructType`` of ``ddl`` (``"a int, b string, c decimal(38,0)"``: plain columns of
    the types in ``_TYPES`` or ``decimal(p,s)``, nullable as Spark's parser makes them); the
    text itself where a column is of another form (Spark parses it then)."""
    from pyspark.sql import types as T  # noqa: N812

    classes = {"Integer": T.IntegerType, "Long": T.LongType, "Short": T.ShortType,
               "Byte": T.ByteType, "String": T.StringType, "Binary": T.BinaryType,
               "Double": T.DoubleType, "Float": T.FloatType, "Boolean": T.BooleanType,
               "Date": T.DateType, "Timestamp": T.TimestampType}
    fields = []
    for column in _columns(ddl):
        parts = column.split(None, 1)
        if len(parts) != 2 or not parts[0].replace("_", "a").isalnum():
            return ddl
        col, kind = parts[0], parts[1].strip().lower()
        cls = _TYPES.get(kind)
        if cls is not None:
            data_type = classes[cls]()
        elif kind.startswith("decimal(") and kind.endswith(")"):
            try:
                precision, scale = (int(x) for x in kind[len("decimal("):-1].split(","))
            except ValueError:
                return ddl
            data_type = T.DecimalType(precision, scale)
        else:
            return ddl
        fields.append(T.StructField(col, data_type, True))
    return T.StructType(fields) if fields else ddl


def _columns(ddl: str) -> list[str]:
    """The columns of a DDL schema, split at the commas outside parentheses."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(ddl):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(ddl[start:i].strip())
            start = i + 1
    out.append(ddl[start:].strip())
    return [c for c in out if c]
