"""The Parquet files output against pyarrow's own writer, in the same run.

A job on TestRunner sends ``rows`` dicts ``{"id": int, "user": str, "amount": float}`` from a
memory input to a Parquet output (``samza_dsl.files``: a declared schema, row groups of 65,536
rows, zstd, committed at the end), timed from the run's start to its end; the baseline is a
plain loop writing the same rows with ``pyarrow.parquet.ParquetWriter`` in the same row
groups, with the same schema and codec. Each is run ``--runs`` times, alternating, each into a
fresh folder; one JSON line per run and a median line with the ratio.

    .venv/bin/python -m benchmarks.parquet_files --rows 1000000 --runs 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import RowRuns

SCHEMA = {"id": "int64", "user": "string", "amount": "double"}
GROUP = 65536


def make_rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "user": f"user-{i % 5000}", "amount": i * 0.25} for i in range(n)]


def plain_loop(rows: list[dict[str, Any]], folder: Path) -> float:
    """pyarrow's writer alone: row groups of GROUP rows from the same dicts."""
    schema = pa.schema([(k, pa.type_for_alias(t)) for k, t in SCHEMA.items()])
    began = time.perf_counter()
    with pq.ParquetWriter(folder / "plain.parquet", schema, compression="zstd") as writer:
        for i in range(0, len(rows), GROUP):
            chunk = rows[i:i + GROUP]
            writer.write_table(pa.Table.from_pylist(chunk, schema=schema),
                               row_group_size=len(chunk))
    return time.perf_counter() - began


def job(rows: list[dict[str, Any]], folder: Path) -> float:
    """The same rows through a job's Parquet output on TestRunner."""
    from samza_dsl import StreamApplication
    from samza_dsl.files import FileSystem
    from samza_dsl.systems import MemorySystem
    from samza_dsl.testing import TestRunner

    app = StreamApplication("parquet-bench")
    mem = MemorySystem()
    inp = mem.input("rows")
    out = app.output(FileSystem("files", path=str(folder)).parquet(
        "out", schema=SCHEMA, row_group_rows=GROUP, max_bytes=1 << 40))
    app.input(inp).send_to(out)
    runner = TestRunner(app).add_input(inp, rows)
    began = time.perf_counter()
    runner.run(timeout=600)
    return time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rows = make_rows(args.rows)
    runs = RowRuns("parquet-files", args.rows)
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            p = plain_loop(rows, Path(a))
            j = job(rows, Path(b))
            got = pq.read_table(b).num_rows  # the job's committed files hold every row
            assert got == args.rows, f"the job's files hold {got} rows, not {args.rows}"
        runs.add(p, j)
    runs.summary()


if __name__ == "__main__":
    main()
