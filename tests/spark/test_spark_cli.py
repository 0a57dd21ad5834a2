"""``samza-dsl reprocess`` run as a user runs it (the console script, in a subprocess, on real
PySpark local[2]), and ``StageProgress`` on the test session's own Spark jobs.

The example application is ``examples/reprocess_page_views.py``: views filtered, repartitioned by
country and counted per country in one-minute windows of event time. Its expected output is
computed here from the input, without the runtime.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runtime.spark.progress import StageProgress

REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "samza-dsl"
APP = "examples/reprocess_page_views.py:app"
JOB = "country-views-1"
INTERMEDIATE = f"{JOB}-partition_by-by-country"
ERROR_PREFIX = "samza-dsl reprocess: error: "


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("reprocess_page_views_for_tests",
                                                  REPO / "examples" / "reprocess_page_views.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _example()


def expected_counts(views: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    """Views by people, per (country, start of their minute in ms)."""
    out: Counter[tuple[str, int]] = Counter()
    for v in views:
        if not v["bot"]:
            out[(v["country"], int(round(v["ts"] * 1000)) // 60_000 * 60_000)] += 1
    return out


def counts_of(messages: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    out: Counter[tuple[str, int]] = Counter()
    for m in messages:
        assert m["key"] == m["value"]["country"]
        key = (m["value"]["country"], m["value"]["window_start_ms"])
        assert key not in out, f"two panes for {key}"
        out[key] = m["value"]["views"]
    return out


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl_dir(path: Path) -> list[Any]:
    assert path.is_dir(), f"{path} is not a directory of part files"
    out: list[Any] = []
    for f in sorted(path.iterdir()):
        if f.name.startswith(("_", ".")):
            continue
        out.extend(json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()
                   if line.strip())
    return out


#: what a run of these small inputs may take, its JVM's start included: about 20 s on a quiet
#: 2-core machine, 60 s with the rest of the suite and both brokers' parts beside it (a run
#: that hangs meets ``reprocess``'s timeout instead)
SLOW_S = 80


def reprocess(*argv: str, timeout: float = 90) -> tuple[int, str, str, float]:
    assert CLI.exists(), f"the samza-dsl console script is not installed next to {sys.executable}"
    t0 = time.monotonic()
    proc = subprocess.run([str(CLI), "reprocess", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0


def summary_rows(out: str) -> dict[str, list[str]]:
    """The summary table's rows by stream id: [kind, rows, where...]."""
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("  ") and len(parts) >= 3 and parts[1] in ("input", "output",
                                                                       "intermediate"):
            rows[parts[0]] = parts[1:]
    return rows


def operator_rows(out: str) -> dict[str, list[str]]:
    """The summary's operator table by op id: [kind, in, out, ms, (panes, late)]."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["operator", "kind"])
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        parts = line.split()
        rows[parts[0]] = parts[1:]
    return rows


def error_lines(err: str) -> list[str]:
    """stderr without the JVM's own notice about incubator modules (printed before any of ours)."""
    return [ln for ln in err.splitlines()
            if ln.strip() and not ln.startswith("WARNING: Using incubator modules")]


# -- the command ---------------------------------------------------------------------------------

def test_reprocess_writes_the_output_and_prints_the_summary(tmp_path: Path) -> None:
    views = example.sample_input(3000, seed=1)
    # a directory of two files: the input is both, in file order
    inputs = tmp_path / "views"
    inputs.mkdir()
    write_jsonl(inputs / "a.jsonl", views[:1700])
    write_jsonl(inputs / "b.jsonl", views[1700:])
    target = tmp_path / "counts.jsonl"
    events = tmp_path / "events"
    events.mkdir()

    # --conf goes to Spark (repeatable): here its event log, which records the session's settings
    code, out, err, seconds = reprocess(APP, "--input", f"page-views={inputs}",
                                        "--output", f"country-counts={target}",
                                        "--conf", "spark.eventLog.enabled=true",
                                        "--conf", f"spark.eventLog.dir={events.as_uri()}",
                                        "--conf", "spark.eventLog.compress=false",
                                        "--conf", "spark.samza.test.marker=given")
    assert code == 0, err
    logs = [p for p in events.rglob("*") if p.is_file()]  # Spark 4: a directory of parts
    assert logs, list(events.rglob("*"))
    settings = next(json.loads(line) for log in logs for line in log.read_text().splitlines()
                    if '"SparkListenerEnvironmentUpdate"' in line)["Spark Properties"]
    settings = dict(settings.items() if isinstance(settings, dict) else settings)
    assert settings["spark.samza.test.marker"] == "given"
    assert settings["spark.ui.enabled"] == "false"  # the runner's defaults stay
    assert seconds < SLOW_S, f"reprocess took {seconds:.0f} s"

    expected = expected_counts(views)
    written = read_jsonl_dir(target)
    assert counts_of(written) == expected
    assert len(written) == len(expected)

    lines = out.splitlines()
    assert re.fullmatch(rf"reprocessed '{JOB}' in \d+\.\d s", lines[0]), out
    rows = summary_rows(out)
    assert rows["page-views"][:2] == ["input", f"{len(views):,}"]
    assert rows["country-counts"][:2] == ["output", f"{len(expected):,}"]
    assert str(target) in " ".join(rows["country-counts"][2:])
    humans = sum(1 for v in views if not v["bot"])
    assert rows[INTERMEDIATE][:2] == ["intermediate", f"{humans:,}"]

    # the operators, one line each in plan order: id, kind, in, out, ms (windows: panes, late)
    ops = operator_rows(out)
    assert list(ops)[:4] == [f"{JOB}-filter-humans", f"{JOB}-partition_by-by-country",
                             f"{JOB}-window-views-per-minute", f"{JOB}-map-count-record"], out
    assert len(ops) == 5 and list(ops.values())[4][0] == "send_to", out
    assert ops[f"{JOB}-filter-humans"][:3] == ["filter", f"{len(views):,}", f"{humans:,}"]
    assert ops[f"{JOB}-partition_by-by-country"][:3] == ["partition_by", f"{humans:,}",
                                                         f"{humans:,}"]
    panes = f"{len(expected):,}"
    assert ops[f"{JOB}-window-views-per-minute"][:3] == ["window", f"{humans:,}", panes]
    assert ops[f"{JOB}-window-views-per-minute"][4:] == [panes, "0"]  # panes, late dropped
    assert ops[f"{JOB}-map-count-record"][:3] == ["map", panes, panes]
    assert all(float(row[3].replace(",", "")) >= 0 for row in ops.values())

    # progress on stderr: plain lines (stderr is a pipe), then the table of stages
    assert "\r" not in err
    bars = [ln for ln in err.splitlines() if ln.startswith("[stage ")]
    assert bars and all(f"samza-dsl {JOB}: " in ln and " tasks" in ln for ln in bars), err
    assert any(re.search(r"(\d+)/\1 tasks.* complete in \d+\.\d s$", ln) for ln in bars), err
    table = err[err.index("stage  status"):].splitlines()
    assert re.fullmatch(r"\d+ stage\(s\), \d+ task\(s\) in \d+\.\d s", table[-1]), table
    assert all("COMPLETE" in row for row in table[1:-1]), table
    # each stage named by what it does: the shuffle's map side by its plan stage, the last by
    # its job (the write)
    names = [row.split(maxsplit=4)[4] for row in table[1:-1]]
    assert names == [f"samza-dsl {JOB}: stage-0: page-views -> {INTERMEDIATE}",
                     f"samza-dsl {JOB}: write country-counts to jsonl {target}"], table
    assert "Traceback" not in err and " WARN " not in err and "ERROR" not in err, err


def test_outputs_without_a_path_are_counted_and_shown(tmp_path: Path) -> None:
    views = example.sample_input(1500, seed=2)
    parquet = tmp_path / "views.parquet"
    pq.write_table(pa.Table.from_pylist(views), parquet)

    code, out, err, seconds = reprocess(APP, "--input", f"page-views={parquet}", "--no-progress",
                                        "--show", "2", "--master", "local[2]")
    assert code == 0, err
    assert seconds < SLOW_S, f"reprocess took {seconds:.0f} s"
    expected = expected_counts(views)
    assert summary_rows(out)["page-views"][:2] == ["input", f"{len(views):,}"]
    assert (f"country-counts: {len(expected)} message(s) (no --output country-counts=PATH: "
            f"not written)") in out.splitlines()
    shown = [ln for ln in out.splitlines() if ln.startswith("  KV(")]
    assert len(shown) == 2, out
    assert all("'window_start_ms'" in ln and "'views'" in ln for ln in shown)
    assert f"  ... {len(expected) - 2} more" in out.splitlines()
    assert "[stage " not in err and "stage(s)" not in err, err  # --no-progress
    assert error_lines(err) == [], err
    assert not list(tmp_path.glob("*.jsonl")), "an output without --output was written"


def test_a_row_that_fails_is_one_error_line_and_writes_nothing(tmp_path: Path) -> None:
    views = example.sample_input(50)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(v) + "\n" for v in views) + "{not json\n",
                   encoding="utf-8")
    target = tmp_path / "counts.jsonl"

    code, out, err, seconds = reprocess(APP, "--input", f"page-views={bad}", "--output",
                                        f"country-counts={target}", "--no-progress")
    assert code == 2, (out, err)
    assert seconds < SLOW_S, f"reprocess took {seconds:.0f} s"
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert lines[0].startswith(ERROR_PREFIX), err
    assert "page-views" in lines[0] and "bad.jsonl" in lines[0], err
    assert out == ""
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.jsonl"], "temporary output left behind"


# -- errors found before Spark starts ------------------------------------------------------------

@pytest.mark.parametrize(("argv", "fragments"), [
    (["--input", "page-views=does/not/exist.jsonl"],
     ["--input page-views: does/not/exist.jsonl does not exist"]),
    (["--input", "page-view={views}"],
     ["--input 'page-view': not an input stream of 'country-views'", "its inputs: page-views"]),
    (["--input", "page-views={views}", "--output", "counts={tmp}/out.jsonl"],
     ["--output 'counts': not an output stream of 'country-views'",
      "its outputs: country-counts"]),
    (["--input", "page-views"], ["--input takes STREAM=PATH, got 'page-views'"]),
    (["--input", "=views.jsonl"], ["--input takes STREAM=PATH, got '=views.jsonl'"]),
    (["--input", "page-views={views}", "--input", "page-views={views}"],
     ["--input 'page-views' is given twice"]),
    ([], ["reads 'page-views': give every input with --input STREAM=PATH"]),
    (["--input", "page-views={views}", "-c", "nonsense"], ["-c takes KEY=VALUE, got 'nonsense'"]),
    (["--input", "page-views={views}", "--conf", "spark.executor.memory"],
     ["--conf takes a Spark setting KEY=VALUE, got 'spark.executor.memory'"]),
    (["--input", "page-views={views}", "--conf", "task.window.ms=10"],
     ["--conf task.window.ms: Spark settings start with 'spark.'",
      "the application's config goes in -c task.window.ms=10"]),
], ids=["missing-path", "unknown-input", "unknown-output", "no-path", "no-stream", "twice",
        "no-input", "bad-config", "bad-spark-conf", "app-config-as-spark-conf"])
def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path, argv: list[str],
                                              fragments: list[str]) -> None:
    views = write_jsonl(tmp_path / "views.jsonl", example.sample_input(5))
    argv = [a.format(views=views, tmp=tmp_path) for a in argv]
    code, out, err, seconds = reprocess(APP, *argv, timeout=60)
    assert code == 2, (out, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(ERROR_PREFIX), err
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert seconds < 20, "a usage error should not wait for Spark"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["views.jsonl"]


def test_an_application_that_cannot_be_loaded_is_one_line() -> None:
    code, out, err, _ = reprocess("examples/nope.py:app", "--input", "x=y", timeout=60)
    assert code == 2
    assert err.startswith(ERROR_PREFIX + "application file 'examples/nope.py' does not exist")
    assert len(err.splitlines()) == 1


# -- StageProgress -------------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _slow_job(sc: Any, description: str, tasks: int = 6, sleep: float = 0.25) -> int:
    sc.setJobDescription(description)
    try:
        return int(sc.parallelize(range(tasks * 4), tasks)
                   .map(lambda x: (time.sleep(sleep / 4), x % 3)[1])
                   .map(lambda k: (k, 1)).reduceByKey(lambda a, b: a + b, 3).count())
    finally:
        sc.setJobDescription(None)


def test_stage_progress_records_every_stage_and_prints_plain_lines(spark: Any) -> None:
    sc = spark.sparkContext
    sc.parallelize(range(10), 2).count()  # before: not recorded
    stream = io.StringIO()
    with StageProgress(sc, stream=stream, interval=0.05) as progress:
        assert _slow_job(sc, "samza-dsl test: slow") == 3
        sc.setJobDescription("samza-dsl test: quick")
        sc.parallelize(range(100), 4).sum()  # may start and end between two polls
        sc.setJobDescription(None)
    stages = progress.stages
    assert [s.name for s in stages] == ["samza-dsl test: slow"] * 2 + ["samza-dsl test: quick"]
    assert [s.tasks for s in stages] == [6, 3, 4]
    assert all(s.status == "COMPLETE" and s.completed_tasks == s.tasks and s.failed_tasks == 0
               for s in stages), stages
    assert stages[0].seconds >= 6 * 0.25 / 2 * 0.8  # two task slots
    assert [s.id for s in stages] == sorted(s.id for s in stages)
    assert "reduceByKey" in stages[0].callsite or "count" in stages[0].callsite
    assert stages[0].as_dict()["name"] == "samza-dsl test: slow"

    text = stream.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert all(re.fullmatch(r"\[stage \d+: samza-dsl test: (slow|quick)\] [#.]{24}  \d+/\d+ "
                            r"tasks.*", ln) for ln in lines), lines
    # one final line per stage, and at most a line a second while it runs
    for s in stages:
        own = [ln for ln in lines if ln.startswith(f"[stage {s.id}: ")]
        assert own[-1].endswith(" s") and "complete in" in own[-1], own
        assert sum("complete in" in ln for ln in own) == 1
        assert len(own) <= 2 + s.seconds, own

    table = progress.table().splitlines()
    assert table[0].split() == ["stage", "status", "tasks", "seconds", "name"]
    assert len(table) == 2 + len(stages)
    assert table[-1].startswith("3 stage(s), 13 task(s) in ")


def test_stage_progress_redraws_in_place_on_a_terminal(spark: Any) -> None:
    sc = spark.sparkContext
    term = _Terminal()
    with StageProgress(sc, stream=term, interval=0.05) as progress:
        _slow_job(sc, "samza-dsl test: terminal", tasks=4)
    text = term.getvalue()
    assert "\r\x1b[K[stage " in text
    assert text.endswith("\r\x1b[K"), repr(text[-80:])  # the bars are cleared at the end
    assert len(progress.stages) == 2


def test_stage_progress_without_a_stream_only_records(spark: Any) -> None:
    sc = spark.sparkContext
    with StageProgress(spark, stream=None, interval=0.05) as progress:  # a session works too
        sc.parallelize(range(40), 4).map(lambda x: x * 2).sum()
    assert [(s.tasks, s.status) for s in progress.stages] == [(4, "COMPLETE")]
    assert progress.seconds > 0
    assert progress.error is None
    with pytest.raises(ValueError, match="interval"):
        StageProgress(sc, interval=0)


def test_without_the_spark_extra_reprocess_says_what_to_install(tmp_path: Path) -> None:
    # this environment's packages but pyspark: a folder of links to them, the only one on the
    # path of an interpreter that reads no site-packages (-S)
    site = Path(pa.__file__).resolve().parents[1]
    view = tmp_path / "site-packages"
    view.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith("pyspark"):
            (view / entry.name).symlink_to(entry)
    main = (f"import sys; sys.path[:0] = [{str(view)!r}, {str(REPO)!r}]; "
            f"sys.argv[0] = 'samza-dsl'; from runtime.ops.cli import main; sys.exit(main())")
    views = write_jsonl(tmp_path / "views.jsonl", example.sample_input(5))
    proc = subprocess.run([sys.executable, "-S", "-c", main, "reprocess", APP, "--input",
                           f"page-views={views}"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"{ERROR_PREFIX}samza-dsl reprocess runs the job on Spark, and pyspark is not installed "
        f"beside samza-dsl ({sys.executable}): install the spark extra, pip install "
        f"'samza-dsl[spark]'"], proc.stderr
