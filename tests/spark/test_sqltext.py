"""runtime.spark.sqltext against Spark itself: the schemas built in Python are the ones Spark's
parser makes of the same DDL, and a string literal reads back as the string, whatever it holds
(a stream id is a user's name)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import _parse_datatype_string

from runtime.spark.declared import _PANE_SCHEMA
from runtime.spark.shuffle import SCHEMA
from runtime.spark.sqltext import quoted, sql_string, struct_type

DDLS = [
    SCHEMA,
    _PANE_SCHEMA,
    "_k int, p int, _pk string, _wk bigint, _start bigint, _n bigint, _v decimal(38,0)",
    "a double, b boolean, c float, d date, e timestamp, f smallint, g tinyint, h decimal(10, 2)",
]


@pytest.mark.parametrize("ddl", DDLS)
def test_a_schema_built_in_python_is_the_one_spark_parses(spark: Any, ddl: str) -> None:
    ours = struct_type(ddl)
    assert not isinstance(ours, str), ddl
    assert ours == _parse_datatype_string(ddl)


@pytest.mark.parametrize("ddl", ["a array<int>", "a struct<b: int>", "a map<string, int>",
                                 "a int not null", "a int comment 'x'"])
def test_a_schema_of_another_form_is_left_to_spark(ddl: str) -> None:
    assert struct_type(ddl) == ddl


@pytest.mark.parametrize("s", ["plain", "it's", "back\\slash", "\\'", "''", "naïve ☃",
                               "new\nline", "tab\tand `tick`", ""])
def test_a_string_literal_reads_back_as_the_string(spark: Any, s: str) -> None:
    assert spark.sql(f"SELECT {sql_string(s)} AS v").first().v == s


def test_the_rows_of_streams_whose_ids_need_quoting_are_selected(spark: Any) -> None:
    from runtime.spark.shuffle import PassOutput

    ids = ["a'b", "c\\d", "plain"]
    df = spark.createDataFrame(
        [(0, sid, 0, 0, i, 0, None, b"m") for i, sid in enumerate([*ids, "other"])],
        struct_type(SCHEMA))
    out = PassOutput(spark, None, "test", df=df)  # type: ignore[arg-type]
    assert sorted(r.sid for r in out.rows(ids).collect()) == sorted(ids)
    assert [r.sid for r in out.rows(["other"]).collect()] == ["other"]


def test_a_quoted_column_name_selects_the_column(spark: Any) -> None:
    df = spark.createDataFrame([(1, 2)], "`a``b` int, c int")
    assert df.selectExpr(f"{quoted('a`b')} AS x").first().x == 1
