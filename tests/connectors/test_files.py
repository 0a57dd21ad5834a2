"""Parquet and JSON Lines outputs (``samza_dsl.files``) on TestRunner and on the local system:
rows as declared or as given, files closed by size, by age and at commits, temporary files
hidden and renamed at commit, and what a start finds in the folder (``recover``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from runtime.connectors.files import FileOptions, JsonLinesSink, ParquetSink
from samza_dsl import KV, StreamApplication
from samza_dsl.connectors import Committed, SinkContext
from samza_dsl.errors import SamzaError
from samza_dsl.files import FileSystem
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

CTX = SinkContext("job-1", "Partition 0", "rows", "files", 1, {})


def _app(out: Path, **parquet: Any) -> tuple[StreamApplication, Any]:
    app = StreamApplication("files")
    inp = MemorySystem().input("in")
    files = FileSystem("files", path=str(out))
    s = app.input(inp)
    s.send_to(app.output(files.parquet("rows", **parquet)))
    s.map(lambda kv: kv.value, name="values").send_to(app.output(files.jsonl("lines",
                                                                             max_bytes=200)))
    return app, inp


def test_rows_land_in_parquet_and_json_lines_files_each_once(tmp_path: Path) -> None:
    app, inp = _app(tmp_path, schema={"key": "string", "n": "int64"}, max_bytes=1,
                    row_group_rows=10)
    msgs = [KV(str(i), {"n": i}) for i in range(100)]
    TestRunner(app).add_input(inp, msgs).run()
    table = ds.dataset(tmp_path / "rows", format="parquet").to_table()
    assert table.schema == pa.schema([("key", pa.string()), ("n", pa.int64())])
    assert sorted(table.column("n").to_pylist()) == list(range(100))
    names = sorted(os.listdir(tmp_path / "rows"))
    assert len(names) == 10  # closed after every row group of 10 (max_bytes=1)
    assert names[0] == "part-partition-0-000000.parquet"
    lines = [json.loads(line) for name in sorted(os.listdir(tmp_path / "lines"))
             for line in (tmp_path / "lines" / name).read_text().splitlines()]
    assert sorted(x["n"] for x in lines) == list(range(100))
    assert len(os.listdir(tmp_path / "lines")) > 1  # closed by size (max_bytes=200)


def test_a_schema_is_inferred_from_dicts_and_rows_that_do_not_fit_a_declared_one_fail(
        tmp_path: Path) -> None:
    app, inp = _app(tmp_path / "a")
    TestRunner(app).add_input(inp, [KV("k", {"n": 1, "s": "x"})]).run()
    table = ds.dataset(tmp_path / "a" / "rows", format="parquet").to_table()
    assert table.to_pylist() == [{"key": "k", "n": 1, "s": "x"}]
    app, inp = _app(tmp_path / "b", schema={"n": "int64"})
    with pytest.raises(SamzaError, match="do not fit the schema") as err:
        TestRunner(app).add_input(inp, [KV("k", {"n": "not a number"})]).run()
    assert "output 'rows'" in str(err.value)
    assert not [n for n in os.listdir(tmp_path / "b" / "rows") if not n.startswith(".")]


def _sink(folder: Path, fmt: str = "jsonl", **options: Any) -> Any:
    opts = FileOptions(str(folder), fmt, **options)
    sink = JsonLinesSink(opts) if fmt == "jsonl" else ParquetSink(opts)
    sink.open(CTX)
    return sink


def test_files_are_hidden_until_commit_and_closed_by_age(tmp_path: Path) -> None:
    sink = _sink(tmp_path, max_seconds=0.05)
    sink.recover(Committed())
    sink.write(0, {"n": 1})
    time.sleep(0.06)
    sink.write(0, {"n": 2})  # the first file is 0.06 s old: closed, a second opened
    assert sorted(os.listdir(tmp_path)) == [".part-partition-0-000000.jsonl.inprogress",
                                            ".part-partition-0-000001.jsonl.inprogress"]
    assert sink.prepare(1) == 1
    assert all(n.startswith(".") for n in os.listdir(tmp_path))  # prepared: still hidden
    sink.commit(1)
    assert sorted(os.listdir(tmp_path)) == ["part-partition-0-000000.jsonl",
                                            "part-partition-0-000001.jsonl"]
    assert sink.prepare(2) == 1  # nothing new: the same position
    sink.close()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_start_renames_what_its_checkpoint_holds_and_deletes_the_rest(
        tmp_path: Path, fmt: str) -> None:
    sink = _sink(tmp_path, fmt, max_bytes=1, row_group_rows=1)
    sink.recover(Committed())
    for n in range(3):
        sink.write(0, {"n": n})  # one file each
    assert sink.prepare(1) == 2  # the checkpoint records sequence 2... and the crash comes
    sink.write(0, {"n": 3})
    sink.write(0, {"n": 4})  # sequences 3 and 4, and an open one: past the checkpoint
    again = _sink(tmp_path, fmt)
    again.recover(Committed(1, 2))
    ext = ".jsonl" if fmt == "jsonl" else ".parquet"
    assert sorted(os.listdir(tmp_path)) == [f"part-partition-0-{i:06d}{ext}" for i in range(3)]
    assert again.seq == 3  # the rows after the checkpoint go into new files of 3 on
    if fmt == "parquet":
        got = [pq.read_table(tmp_path / f"part-partition-0-{i:06d}{ext}").to_pylist()
               for i in range(3)]
        assert got == [[{"n": 0}], [{"n": 1}], [{"n": 2}]]


def test_a_job_started_afresh_never_overwrites_a_committed_file(tmp_path: Path) -> None:
    (tmp_path / "part-partition-0-000007.jsonl").write_text('{"n": 0}\n')
    (tmp_path / ".part-partition-0-000008.jsonl.inprogress").write_text('{"n"')
    sink = _sink(tmp_path)
    sink.recover(Committed())  # no checkpoint (a reset job): nothing of its own is committed
    assert sorted(os.listdir(tmp_path)) == ["part-partition-0-000007.jsonl"]
    sink.write(0, {"n": 1})
    sink.prepare(1)
    sink.commit(1)
    assert sorted(os.listdir(tmp_path)) == ["part-partition-0-000007.jsonl",
                                            "part-partition-0-000008.jsonl"]
