"""An input's event_time that fails on a record names the record and the event_time on Spark,
as on the streaming runtime, rather than blaming the serde."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.spark import FileInput, ReprocessError, SparkRunner
from runtime.spark.sources import event_ms
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem


def test_a_failing_event_time_names_the_row_and_the_event_time(spark: Any) -> None:
    app = StreamApplication("spark-et")
    mem = MemorySystem()
    serde = KVSerde(StringSerde(), JsonSerde())
    views = app.input(mem.input("views", serde=serde, partitions=1,
                                event_time=lambda kv: kv.value["ts"]))
    views.send_to(app.output(mem.output("out", serde=serde)))
    rows = [KV("a", {"ts": 1.0}), KV("b", {"no-ts": 2.0}), KV("c", {"ts": 3.0})]
    with pytest.raises(ReprocessError) as info:
        SparkRunner(spark).reprocess(app, {"views": rows})
    text = str(info.value)
    assert "input 'views': row 1 of" in text
    assert "the input's event_time failed on it: KeyError: 'ts'" in text
    assert "fix the record or the input's event_time" in text and "serde" not in text


def test_a_failing_event_time_names_the_parquet_file_and_row(spark: Any, tmp_path: Path) -> None:
    """A Parquet input's event times are taken a batch at a time; the row that fails is still
    the one named."""
    app = StreamApplication("spark-et-parquet")
    mem = MemorySystem()
    views = app.input(mem.input("views", event_time=lambda m: m["ts"] / 1))
    views.partition_by(lambda m: m["k"], name="by-k").send_to(app.output(mem.output("out")))
    path = tmp_path / "views.parquet"
    pq.write_table(pa.table({"k": ["a", "b", "c", "d"], "ts": [1.0, 2.0, None, 4.0]}), path)
    with pytest.raises(ReprocessError) as info:
        SparkRunner(spark).reprocess(app, {"views": FileInput(str(path), format="parquet")})
    text = str(info.value)
    assert "input 'views': row 2 of" in text and "views.parquet" in text
    assert "the input's event_time failed on it: TypeError" in text
    ok = tmp_path / "ok.parquet"
    pq.write_table(pa.table({"k": ["a", "b"], "ts": [1.0, 2.5]}), ok)
    result = SparkRunner(spark).reprocess(app, {"views": FileInput(str(ok), format="parquet")})
    assert sorted(kv.key for kv in result.messages("out")) == ["a", "b"]


# -- event times a batch at a time ------------------------------------------------------------------

seconds = st.one_of(
    st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
    st.integers(min_value=-10**12, max_value=10**12),
    # ties and near-ties of rounding to the ms
    st.builds(lambda ms, frac: (ms + frac) / 1000, st.integers(-10**9, 10**13),
              st.sampled_from([0.5, -0.5, 0.4999, 0.5001, 1.5, 2.5])))


@settings(max_examples=300, deadline=None)
@given(st.lists(seconds, max_size=50))
def test_event_times_a_batch_at_a_time_are_round_of_each(values: list[float]) -> None:
    got = event_ms(lambda m: m, values)
    assert got == [round(v * 1000) for v in values]
    assert all(type(ms) is int for ms in got)


@pytest.mark.parametrize("bad", [None, "1.5", Decimal("1.5"), True, math.nan, math.inf, 1e300,
                                 2 ** 70, np.float32(1.5)])
def test_event_times_that_are_not_plain_numbers_go_one_by_one(bad: Any) -> None:
    """Anything but a plain int or float (or one beyond exact doubles) is left to the
    per-message path, which names the row that fails or takes the value as it is."""
    assert event_ms(lambda m: m, [1.0, bad]) is None


def test_a_failing_event_time_goes_one_by_one() -> None:
    assert event_ms(lambda m: m["ts"], [{"ts": 1.0}, {}]) is None
