"""``samza-dsl reprocess``: the job over files (or Kafka topics) on Spark, from the command line
(``runtime.spark``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence

from runtime.ops.cli_config import cli_config as _cli_config
from samza_dsl.errors import SamzaError

__all__ = ["cmd_reprocess"]


def _stream_paths(pairs: Sequence[str], flag: str, known: Mapping[str, object], what: str,
                  app_name: str) -> dict[str, str]:
    """``STREAM=PATH`` pairs -> {stream id: path}, naming the flag and the streams on an error."""
    out: dict[str, str] = {}
    for pair in pairs:
        sid, sep, path = pair.partition("=")
        sid, path = sid.strip(), path.strip()
        if not sep or not sid or not path:
            raise SamzaError(f"{flag} takes STREAM=PATH, got {pair!r}")
        if sid not in known:
            raise SamzaError(f"{flag} {sid!r}: not an {what} stream of {app_name!r}; its {what}s: "
                             f"{', '.join(sorted(known)) or 'none'}")
        if sid in out:
            raise SamzaError(f"{flag} {sid!r} is given twice")
        out[sid] = path
    return out


def _local_path_missing(path: str) -> bool:
    """A plain local path (no URI scheme, no glob) that does not exist."""
    if "://" in path or path.startswith("file:") or any(c in path for c in "*?["):
        return False
    return not os.path.exists(path)


def _make_output_dirs(outputs: Mapping[str, str]) -> None:
    """The parent directory of each local ``--output`` path, made now: before Spark starts, so a
    path that cannot be made is an error at once."""
    for sid, path in outputs.items():
        if "://" in path or path.startswith("file:"):
            continue
        parent = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise SamzaError(f"--output {sid}: cannot make the directory {parent} for {path}: "
                             f"{exc.strerror or exc}; choose a path you can write to") from None


@contextlib.contextmanager
def _quiet_spark() -> Iterator[None]:
    """While the runner starts Spark: no pandas-version warning from PySpark. The JVM starts
    quietly on its own (``runtime.spark.jvm``), so its start-up warnings and the executors' task
    tracebacks do not bury the progress, the summary or the error (a failed run is one
    ``ReprocessError`` line)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*does not yet fully support pandas")
    yield


def _spark_conf(pairs: Sequence[str]) -> dict[str, str]:
    """``--conf spark.KEY=VALUE`` pairs: Spark's own settings, as spark-submit takes them."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SamzaError(f"--conf takes a Spark setting KEY=VALUE, got {pair!r}")
        if not key.startswith("spark."):
            raise SamzaError(f"--conf {key}: Spark settings start with 'spark.' (e.g. --conf "
                             f"spark.executor.memory=2g); the application's config goes in "
                             f"-c {pair}")
        out[key] = value.strip()
    return out


#: what the spark extra installs (pyproject.toml), which only ``reprocess`` needs
_SPARK_EXTRA = ("pyspark", "pyarrow", "pandas")


def cmd_reprocess(args: argparse.Namespace) -> int:
    import importlib.util

    from runtime.ops.loader import load_app

    for name in _SPARK_EXTRA:  # before anything starts: one line, not an import's traceback
        if importlib.util.find_spec(name) is None:
            raise SamzaError(f"samza-dsl reprocess runs the job on Spark, and {name} is not "
                             f"installed beside samza-dsl ({sys.executable}): install the "
                             f"spark extra, pip install 'samza-dsl[spark]'")
    config = _cli_config(args)
    spark_conf = _spark_conf(args.conf)
    app = load_app(args.app)
    from planner import refuse_processing_time_joins

    refuse_processing_time_joins(app.spec(), "Spark")  # before Spark starts
    inputs = _stream_paths(args.input, "--input", app.spec().inputs, "input", app.name)
    outputs = _stream_paths(args.output, "--output", app.spec().outputs, "output", app.name)
    missing = sorted(set(app.spec().inputs) - set(inputs))
    if missing:
        raise SamzaError(f"{args.app} reads {', '.join(map(repr, missing))}: give every input "
                         f"with --input STREAM=PATH")
    for sid, path in inputs.items():
        if _local_path_missing(path):
            raise SamzaError(f"--input {sid}: {path} does not exist (looked in {os.getcwd()})")
    _make_output_dirs(outputs)

    from runtime.spark import SparkRunner
    from runtime.spark.progress import StageProgress

    runner = SparkRunner(master=args.master, conf=spark_conf)
    with _quiet_spark():
        sc = runner.spark.sparkContext
    try:
        with StageProgress(sc,
                           stream=None if args.no_progress else sys.stderr) as progress:
            result = runner.reprocess(app, inputs, outputs=outputs, config=config)
        if not args.no_progress:
            print(progress.table(), file=sys.stderr)
        print(result.summary())
        for sid in sorted(app.spec().outputs):
            if sid in outputs:
                continue
            n = result.rows_out.get(sid)
            msgs = result.messages(sid) if args.show else []
            count = n if n is not None else len(msgs)
            print(f"{sid}: {count} message(s) (no --output {sid}=PATH: not written)")
            for m in msgs[:args.show]:
                print(f"  {m!r}")
            if count > args.show:
                print(f"  ... {count - args.show} more")
        sys.stdout.flush()
    finally:
        runner.stop()
    return 0
