"""An input's event_time that fails on a record names the record and the event_time on Spark,
as on the streaming runtime, rather than blaming the serde."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.spark import ReprocessError, SparkRunner
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
