"""The files outputs take runs of messages (``write_batch``): the files a run of any length
makes are the ones ``write`` of each message makes (the same rows, row groups and file
boundaries), whether the rows are dicts holding every field of the schema, dicts missing one,
or other messages made rows by ``default_row``; and a job whose stream goes straight to a
files output writes through runs."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from runtime.connectors.files import FileOptions, JsonLinesSink, ParquetSink
from samza_dsl import KV, StreamApplication
from samza_dsl.connectors import Committed, SinkContext, Sources
from samza_dsl.files import FileSystem
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

CTX = SinkContext("job-1", "Partition 0", "rows", "files", 1, {})
SCHEMA = {"key": "string", "n": "int64", "s": "string"}


def _messages(kind: str) -> list[Any]:
    if kind == "dicts":
        return [{"key": str(i), "n": i, "s": "x" * (i % 7)} for i in range(700)]
    if kind == "missing":
        return [{"key": str(i), "n": i} if i % 3 else {"n": i, "s": "y"} for i in range(700)]
    return [KV(str(i), {"n": i, "s": "z"}) for i in range(700)]  # rows by default_row


def _written(folder: Path, fmt: str, messages: list[Any], runs: bool) -> dict[str, Any]:
    """The committed files of a sink given ``messages`` one by one or in runs of random
    lengths, with commits at the same messages: {name: (rows, row groups)}."""
    opts = FileOptions(str(folder), fmt, max_bytes=1000 if fmt == "parquet" else 3000,
                       schema=SCHEMA if fmt == "parquet" else None, row_group_rows=64)
    sink = ParquetSink(opts) if fmt == "parquet" else JsonLinesSink(opts)
    sink.open(CTX)
    sink.recover(Committed())
    rng = random.Random(7)
    for cid, (a, b) in enumerate([(0, 250), (250, 500), (500, len(messages))], 1):
        i = a
        while i < b:
            if runs:
                n = min(b - i, rng.choice([1, 5, 63, 64, 65, 200]))
                sink.write_batch(0, messages[i:i + n], Sources("in", 0, range(i, i + n)))
            else:
                n = 1
                sink.write(0, messages[i])
            i += n
        sink.prepare(cid)  # a commit: the open file is closed
        sink.commit(cid)
    sink.close()
    out = {}
    for name in sorted(os.listdir(folder)):
        path = folder / name
        if fmt == "parquet":
            f = pq.ParquetFile(path)
            out[name] = (f.read().to_pylist(), f.metadata.num_row_groups)
        else:
            out[name] = ([json.loads(line) for line in path.read_text().splitlines()], 1)
    return out


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize("kind", ["dicts", "missing", "kv"])
def test_runs_make_the_files_one_by_one_makes(tmp_path: Path, fmt: str, kind: str) -> None:
    messages = _messages(kind)
    one = _written(tmp_path / "one", fmt, messages, runs=False)
    runs = _written(tmp_path / "runs", fmt, messages, runs=True)
    assert len(one) > 3
    assert runs == one


def test_a_job_writes_a_parquet_output_through_runs(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = ParquetSink.write_batch

    def counted(self: ParquetSink, partition: int, messages: list[Any],
                sources: Sources | None) -> None:
        calls.append(len(messages))
        real(self, partition, messages, sources)

    monkeypatch.setattr(ParquetSink, "write_batch", counted)
    app = StreamApplication("files-runs")
    inp = MemorySystem().input("in")
    out = app.output(FileSystem("files", path=str(tmp_path)).parquet(
        "rows", schema={"n": "int64"}, row_group_rows=100))
    app.input(inp).map(lambda n: {"n": n}, name="row").send_to(out)
    TestRunner(app).add_input(inp, list(range(1000))).run()
    assert pq.read_table(tmp_path / "rows").column("n").to_pylist() == list(range(1000))
    assert sum(calls) == 1000 and len(calls) < 1000


def test_a_row_group_is_the_table_from_pylist_makes(tmp_path: Path) -> None:
    """Dicts against a declared schema are converted as one struct array: the same table as
    ``pyarrow.Table.from_pylist`` (a missing field null, other keys left out, values converted
    by the field's type), and rows that do not fit fail as from_pylist says."""
    import datetime

    import pyarrow as pa

    schema = pa.schema([("n", pa.int64()), ("x", pa.float64()), ("s", pa.string()),
                        ("t", pa.timestamp("ms")), ("l", pa.list_(pa.int64())),
                        ("o", pa.struct([("k", pa.string())]))], metadata={"m": "1"})
    rows = [{"n": 1, "x": 2, "s": "a", "t": datetime.datetime(2024, 5, 1, 12),
             "l": [1, 2], "o": {"k": "v"}, "extra": object()},
            {"n": None, "s": "b", "l": None, "o": {}},
            {}]
    sink = ParquetSink(FileOptions(str(tmp_path), "parquet", schema=schema))
    made = sink._table(rows)
    assert made.equals(pa.Table.from_pylist(rows, schema=schema), check_metadata=True)
    with pytest.raises(pa.ArrowInvalid) as theirs:
        pa.Table.from_pylist([{"n": "one"}], schema=schema)
    with pytest.raises(pa.ArrowInvalid) as ours:
        sink._table([{"n": "one"}])
    assert str(ours.value) == str(theirs.value)
