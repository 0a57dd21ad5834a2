"""``max_event_time_ahead=`` on Spark (real PySpark, local[2]): a row dated in the year 9999 or
at 1e18 ms follows the stream's serde error policy instead of moving the watermark, as in the
streaming runtime, whatever the input's form (a list, JSON Lines, Parquet)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime.spark import ReprocessError, SparkRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

YEAR_9999 = 253402300799.0
FAR = 1e15
ROWS = [{"ts": 1}, {"ts": YEAR_9999}, {"ts": 2}, {"ts": FAR}, {"ts": 15}]


def counting_app(policy: str | None, *, keyed: bool = False) -> StreamApplication:
    config = {"streams.views.samza.serde.error": policy} if policy else None
    app = StreamApplication("ahead", config=config)
    local = LocalSystem()
    et = (lambda kv: kv.value["ts"]) if keyed else (lambda v: v["ts"])
    views = local.input("views", serde=KVSerde(StringSerde(), JsonSerde()) if keyed else None,
                        event_time=et, max_event_time_ahead=timedelta(hours=1))
    (app.input(views)
        .window(Windows.tumbling(timedelta(seconds=10), init=lambda: 0,
                                 fold=lambda v, n: n + 1, event_time=et), name="count")
        .map(lambda pane: (int(pane.key.pane_id), pane.message), name="row")
        .send_to(app.output(local.output("counts"))))
    return app


def _inputs(form: str, tmp_path: Path) -> Any:
    if form == "list":
        return ROWS
    if form == "jsonl":
        path = tmp_path / "views.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
        return str(path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "views.parquet"
    pq.write_table(pa.Table.from_pylist([{"ts": float(r["ts"])} for r in ROWS]), path)
    return str(path)


@pytest.mark.parametrize("form", ["list", "jsonl", "parquet"])
def test_fail_stops_the_run_naming_the_row_and_its_event_time(spark: Any, form: str,
                                                              tmp_path: Path) -> None:
    with pytest.raises(ReprocessError) as err:
        SparkRunner(spark).reprocess(counting_app(None), {"views": _inputs(form, tmp_path)})
    text = str(err.value)
    assert "input 'views': row 1 of" in text, text
    assert "9999-12-31T23:59:59" in text and "max_event_time_ahead of input 'views' (1 h)" \
        in text, text
    assert "streams.views.samza.serde.error to skip or dead-letter" in text, text


@pytest.mark.parametrize("form", ["list", "jsonl", "parquet"])
@pytest.mark.parametrize("policy", ["skip", "dead-letter"])
def test_skip_and_dead_letter_leave_the_far_rows_out_and_count_them(
        spark: Any, form: str, policy: str, tmp_path: Path) -> None:
    result = SparkRunner(spark).reprocess(counting_app(policy), {"views": _inputs(form, tmp_path)})
    assert sorted(result.messages("counts")) == [(0, 2), (10000, 1)]
    assert result.late_counts == {}
    assert result.metrics["views.event-time-ahead-skipped"] == 2
    line = next(ln for ln in result.summary().splitlines() if ln.startswith("skipped: "))
    assert "2 row(s) of views whose event time was too far ahead" in line
    if policy == "dead-letter":
        assert [d["source"] for d in result.dead_letters] == ["views/0/1", "views/0/3"]
        assert [d["value"]["ts"] for d in result.dead_letters] == [YEAR_9999, FAR]
        assert all("ahead of the wall clock" in d["error"] for d in result.dead_letters)
    else:
        assert result.dead_letters == []


def test_a_keyed_input_dead_letters_key_and_value(spark: Any) -> None:
    rows = [KV("a", r) for r in ROWS]
    result = SparkRunner(spark).reprocess(counting_app("dead-letter", keyed=True),
                                          {"views": rows})
    assert sorted(result.messages("counts")) == [(0, 2), (10000, 1)]
    assert [(d["key"], d["value"]) for d in result.dead_letters] == [
        ("a", {"ts": YEAR_9999}), ("a", {"ts": FAR})]
