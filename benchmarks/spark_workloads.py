"""W5 (see docs/benchmarks.md): W3 reprocessed on Spark, ``local[2]``, over 10,000,000 page views
``{"user": str, "country": str, "ts": float seconds}`` in Parquet (8 files).

The compiled job is a samza-dsl application equivalent to W3 (the input's event time is ``ts``;
``partition_by(country)`` into 4 intermediate partitions; a keyed tumbling event-time window of
10 s counting views; each pane sent out as ``(country, pane_id, count)``), run with
``SparkRunner(spark).reprocess(...)`` from the Parquet directory to a directory of JSON Lines.

Two jobs hand-written in PySpark run in the same run, on the same SparkSession and input:

- **rdd** (the target baseline): what a user would write with the RDD API and the same Python
  functions: ``spark.read.parquet(dir).rdd.map(Row.asDict)``, keyed by country,
  ``partitionBy(4)``, each (country, 10 s pane) folded with the same ``init``/``fold``, written
  as JSON Lines with ``saveAsTextFile``.
- **dataframe**: the same counts with the DataFrame API (``groupBy(country, ts - ts % 10)``,
  ``count()``), written with ``DataFrameWriter.json`` (``spark.sql.shuffle.partitions`` 4 for
  that job).

All three outputs are read back (outside the timed part) and must hold the same panes with the
same counts, summing to the number of views. One JSON line per run: ``msgs_per_s`` is the
compiled job's rate, ``ratio`` compiled / rdd, ``ratio_to_dataframe`` compiled / dataframe. The
order of the three jobs rotates from run to run. The input is generated once per process (numpy
and pyarrow, seeded) into a temporary directory removed at exit; a warm-up of all three jobs over
a small input runs first. ``peak_rss_mb`` is the driver's; ``jvm_peak_rss_mb`` the Spark JVM's.

    python benchmarks/run.py W5 --runs 3
    python benchmarks/run.py W5 --scale 0.01 --runs 1

W5d is W5 with the window's aggregation declared: the input declares no event time, the job
repartitions with ``partition_by("country")`` and counts with ``Windows.keyed_tumbling(
key="country", size=10 s, event_time="ts", aggregate=Aggregate.count())``, so ``SparkRunner``
runs it in its declared tier (Spark SQL, ``runtime.spark.declared``). Its baseline is the
hand-written DataFrame job in the same run (``ratio`` = declared / dataframe); the line has
W5's shape, with ``tier`` the tier each stage ran in.

    python benchmarks/run.py W5d --runs 3
    python benchmarks/run.py W5d --scale 0.1 --runs 1
"""

from __future__ import annotations

import atexit
import functools
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

from benchmarks.common import emit, timed
from benchmarks.workloads import COUNTRIES
from samza_dsl import Aggregate, StreamApplication, Windows
from samza_dsl.systems import MemorySystem

__all__ = ["run_w5", "run_w5d", "w5_summary", "w5_data", "w5_app", "w5d_app", "declared_job", "rdd_baseline", "dataframe_baseline",
           "view_country", "view_ts", "kv_country", "kv_ts", "count_init", "count_fold",
           "run_w5_memory", "WorkerPeak"]

FILES = 8
PARTITIONS = 4
WINDOW_MS = 10_000
USERS = 100_000
WARMUP_ROWS = 100_000
SEED = 5
T0_MS = 1_700_000_000_000


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] W5 {msg}", file=sys.stderr, flush=True)


# -- the user's functions: the compiled job and the RDD baseline call these same ones ------------

def view_country(view: dict[str, Any]) -> str:
    return view["country"]


def view_ts(view: dict[str, Any]) -> float:
    return view["ts"]


def kv_country(kv: Any) -> str:
    return kv.key


def kv_ts(kv: Any) -> float:
    return view_ts(kv.value)


def count_init() -> int:
    return 0


def count_fold(_view: Any, n: int) -> int:
    return n + 1


def pane_row(pane: Any) -> tuple[str, str, int]:
    return (pane.key.key, pane.key.pane_id, pane.message)


# -- data --------------------------------------------------------------------------------------

_data_dirs: dict[tuple[int, int], str] = {}
_root: list[str] = []


def _tmp_root() -> str:
    if not _root:
        _root.append(tempfile.mkdtemp(prefix="samza-w5-"))
        atexit.register(shutil.rmtree, _root[0], True)
    return _root[0]


def w5_data(n: int, seed: int = SEED) -> str:
    """A directory of ``FILES`` Parquet files holding n W3 page views (cached per process).

    As W3's input: ts rises by a uniform [0, 10) ms a view (rounded to the ms), users
    ``u1``..``u100000``, countries ``c00``..``c39``; each file holds a contiguous stretch of time."""
    cached = _data_dirs.get((n, seed))
    if cached is not None:
        return cached
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    path = tempfile.mkdtemp(prefix=f"views-{n}-", dir=_tmp_root())
    rng = np.random.default_rng(seed)
    users = pa.array([f"u{i}" for i in range(1, USERS + 1)])
    countries = pa.array(COUNTRIES)
    offset_ms = 0.0
    for f in range(FILES):
        rows = (f + 1) * n // FILES - f * n // FILES
        if rows == 0:
            continue
        steps = rng.random(rows) * 10.0
        ms = offset_ms + np.cumsum(steps)
        offset_ms = float(ms[-1])
        ts = (T0_MS + np.round(ms)) / 1000.0
        table = pa.table({"user": users.take(pa.array(rng.integers(0, USERS, rows))),
                          "country": countries.take(pa.array(rng.integers(0, len(COUNTRIES),
                                                                          rows))),
                          "ts": pa.array(ts, pa.float64())})
        pq.write_table(table, os.path.join(path, f"part-{f:05d}.parquet"),
                       row_group_size=256 * 1024)
    _progress(f"generated {n:,} views in {FILES} Parquet files in {time.perf_counter() - t0:.1f} s")
    _data_dirs[(n, seed)] = path
    return path


# -- the compiled job -------------------------------------------------------------------------

def w5_app() -> StreamApplication:
    app = StreamApplication("w5-reprocess",
                            config={"job.intermediate.stream.partitions": PARTITIONS})
    mem = MemorySystem()
    views = app.input(mem.input("page-views", event_time=view_ts))
    out = app.output(mem.output("counts"))
    (views
        .partition_by(view_country, name="by-country")
        .window(Windows.keyed_tumbling(kv_country, timedelta(seconds=WINDOW_MS / 1000),
                                       init=count_init, fold=count_fold, event_time=kv_ts),
                name="count")
        .map(pane_row, name="row")
        .send_to(out))
    return app


def compiled_job(spark: Any, data_dir: str, out_dir: str) -> Any:
    from runtime.spark import FileInput, SparkRunner

    app = w5_app()
    return SparkRunner(spark).reprocess(app, {"page-views": FileInput(data_dir, format="parquet")},
                                        outputs={"counts": out_dir})


def w5d_app() -> StreamApplication:
    """W5 with the aggregation declared: named key and time fields, ``Aggregate.count()``."""
    app = StreamApplication("w5d-reprocess",
                            config={"job.intermediate.stream.partitions": PARTITIONS})
    mem = MemorySystem()
    views = app.input(mem.input("page-views"))
    out = app.output(mem.output("counts"))
    (views
        .partition_by("country", name="by-country")
        .window(Windows.keyed_tumbling(key="country", size=timedelta(seconds=WINDOW_MS / 1000),
                                       event_time="ts", aggregate=Aggregate.count()),
                name="count")
        .map(pane_row, name="row")
        .send_to(out))
    return app


_tiers: dict[str, str] = {}


def declared_job(spark: Any, data_dir: str, out_dir: str) -> Any:
    from runtime.spark import FileInput, SparkRunner

    result = SparkRunner(spark).reprocess(w5d_app(),
                                          {"page-views": FileInput(data_dir, format="parquet")},
                                          outputs={"counts": out_dir})
    _tiers.update(result.tiers)
    assert set(result.tiers.values()) == {"declared (Spark SQL)"}, \
        f"W5d: the job did not run in the declared tier: {result.tiers}"
    return result


# -- the baselines ----------------------------------------------------------------------------

def _fold_partition(pairs: Any) -> Any:
    """Fold each (country, 10 s pane) of one partition with the job's init and fold."""
    panes: dict[tuple[str, int], Any] = {}
    get = panes.get
    for country, view in pairs:
        ms = round(view_ts(view) * 1000.0)
        pk = (country, ms - ms % WINDOW_MS)
        value = get(pk)
        panes[pk] = count_fold(view, count_init() if value is None else value)
    for (country, start), value in panes.items():
        yield json.dumps((country, str(start), value))


def rdd_baseline(spark: Any, data_dir: str, out_dir: str) -> None:
    from pyspark.sql import Row

    views = spark.read.parquet(data_dir).rdd.map(Row.asDict)
    (views.keyBy(view_country)
        .partitionBy(PARTITIONS)
        .mapPartitions(_fold_partition)
        .saveAsTextFile(out_dir))


def dataframe_baseline(spark: Any, data_dir: str, out_dir: str) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    ts = F.col("ts")
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
    try:
        (spark.read.parquet(data_dir)
            .groupBy("country", ((ts - ts % 10) * 1000).cast("long").alias("pane"))
            .count()
            .write.json(out_dir))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)


# -- checks -----------------------------------------------------------------------------------

def _lines(out_dir: str) -> Any:
    for root, _dirs, files in os.walk(out_dir):
        for name in sorted(files):
            if name.startswith(("_", ".")) or name.endswith(".crc"):
                continue
            with open(os.path.join(root, name), encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        yield json.loads(line)


def read_panes(out_dir: str) -> dict[tuple[str, int], int]:
    """{(country, pane start ms): count} from any of the three outputs."""
    panes: dict[tuple[str, int], int] = {}
    for rec in _lines(out_dir):
        if isinstance(rec, dict):
            if "pane" in rec:
                country, start, count = rec["country"], rec["pane"], rec["count"]
            else:  # a tuple written as {"_1": ..} or named fields
                country, start, count = list(rec.values())[:3]
        else:
            country, start, count = rec
        pk = (country, int(start))
        assert pk not in panes, f"pane {pk} written twice in {out_dir}"
        panes[pk] = count
    return panes


def _check(name: str, panes: dict[tuple[str, int], int], expected: dict[tuple[str, int], int],
           n: int) -> None:
    total = sum(panes.values())
    assert total == n, f"W5 {name}: the pane counts sum to {total:,}, not {n:,}"
    if panes != expected:
        missing = expected.keys() - panes.keys()
        extra = panes.keys() - expected.keys()
        differ = [k for k in expected.keys() & panes.keys() if expected[k] != panes[k]]
        raise AssertionError(f"W5 {name}: {len(panes)} panes against {len(expected)} "
                             f"({len(missing)} missing, {len(extra)} extra, {len(differ)} "
                             f"with other counts, e.g. {sorted(differ)[:3]})")


# -- the session and the runs -----------------------------------------------------------------

def w5_session(master: str = "local[2]") -> Any:
    """The one SparkSession of a W5 invocation (the workers run this interpreter)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    # this module is not importable by the workers (benchmarks/ is not installed): ship its
    # functions by value, as a script's own functions would be
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark = (SparkSession.builder.master(master).appName("samza-dsl-W5")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _jvm_peak_rss_mb(spark: Any) -> float | None:
    try:
        pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except (OSError, AttributeError, ValueError):
        pass
    return None


JOBS = {"compiled": compiled_job, "rdd": rdd_baseline, "dataframe": dataframe_baseline,
        "declared": declared_job}
ORDERS = [("compiled", "rdd", "dataframe"), ("rdd", "dataframe", "compiled"),
          ("dataframe", "compiled", "rdd")]


def _run_once(spark: Any, n: int, data_dir: str, order: tuple[str, ...],
              jobs: dict[str, Any]) -> dict[str, float]:
    out_root = tempfile.mkdtemp(prefix="out-", dir=_tmp_root())
    try:
        seconds: dict[str, float] = {}
        for name in order:
            gc.collect()
            out_dir = os.path.join(out_root, name)
            spark.sparkContext.setJobGroup(f"w5-{name}", f"W5 {name}")
            seconds[name], _ = timed(functools.partial(jobs[name], spark, data_dir, out_dir))
            _progress(f"{name}: {n:,} views in {seconds[name]:.2f} s")
        ref = "rdd" if "rdd" in order else order[0]
        expected = read_panes(os.path.join(out_root, ref))
        for name in order:
            _check(name, read_panes(os.path.join(out_root, name)) if name != ref else expected,
                   expected, n)
        seconds["panes"] = len(expected)
        return seconds
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


def run_w5(n: int, runs: int = 3, jobs: tuple[str, ...] = ("compiled", "rdd", "dataframe"),
           spark: Any = None, workload: str = "W5") -> list[dict[str, Any]]:
    """``runs`` runs of W5 over n views in one SparkSession, after a warm-up; one line each.
    ``jobs`` other than W5's three rotate their order run by run."""
    own = spark is None
    if own:
        spark = w5_session()
    try:
        selected = {name: JOBS[name] for name in jobs}
        warm = w5_data(min(n, WARMUP_ROWS), seed=SEED + 1)
        _progress("warm-up")
        _run_once(spark, min(n, WARMUP_ROWS), warm, tuple(selected), selected)
        data_dir = w5_data(n)
        lines = []
        for i in range(runs):
            if set(selected) <= set(ORDERS[0]):
                order = tuple(j for j in ORDERS[i % len(ORDERS)] if j in selected)
            else:
                k = i % len(selected)
                order = tuple(selected)[k:] + tuple(selected)[:k]
            secs = _run_once(spark, n, data_dir, order, selected)
            lines.append(_emit(workload, n, secs, order, _jvm_peak_rss_mb(spark)))
        return lines
    finally:
        if own:
            spark.stop()


def run_w5d(n: int, runs: int = 3) -> list[dict[str, Any]]:
    """W5d: the declared job against the DataFrame job, as ``run_w5``."""
    return run_w5(n, runs, ("declared", "dataframe"), workload="W5d")


def _emit(workload: str, n: int, secs: dict[str, float], order: tuple[str, ...],
          jvm_rss: float | None) -> dict[str, Any]:
    params = {"messages": n, "files": FILES, "format": "parquet", "partitions": PARTITIONS,
              "window_s": WINDOW_MS // 1000, "master": "local[2]"}
    main = next((j for j in ("compiled", "declared") if j in secs), order[0])
    rates = {name: n / secs[name] for name in order}
    extra: dict[str, Any] = {"order": list(order), "panes": int(secs["panes"]),
                             "jvm_peak_rss_mb": jvm_rss}
    for name in order:
        extra[f"{name}_seconds"] = round(secs[name], 3)
    if "dataframe" in rates:
        extra["dataframe_msgs_per_s"] = round(rates["dataframe"], 1)
        extra["ratio_to_dataframe"] = round(rates[main] / rates["dataframe"], 3)
    if main == "declared":
        extra["tier"] = dict(_tiers)
    base = "rdd" if "rdd" in rates else "dataframe" if "dataframe" in rates else main
    return emit(workload, params, n, secs[main], f"pyspark-{base}-hand-written", rates[base], **extra)


def w5_summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The median line: as ``common.median_summary``, with the ratio to the DataFrame job."""
    out = {"workload": lines[0]["workload"], "params": lines[0]["params"], "runs": len(lines),
           "median_msgs_per_s": round(statistics.median(ln["msgs_per_s"] for ln in lines), 1),
           "median_baseline_msgs_per_s":
               round(statistics.median(ln["baseline_msgs_per_s"] for ln in lines), 1),
           "median_ratio": round(statistics.median(ln["ratio"] for ln in lines), 3)}
    if all("ratio_to_dataframe" in ln for ln in lines):
        out["median_dataframe_msgs_per_s"] = round(
            statistics.median(ln["dataframe_msgs_per_s"] for ln in lines), 1)
        out["median_ratio_to_dataframe"] = round(
            statistics.median(ln["ratio_to_dataframe"] for ln in lines), 3)
    out["summary"] = True
    print(json.dumps(out), flush=True)
    return out


# -- W5M: the Python workers' memory at 1x, 2x and 4x the input ------------------------------------

class WorkerPeak:
    """The largest peak RSS (``VmHWM``) of the PySpark Python workers of the JVM ``jvm_pid``
    (its descendants) while it runs: a thread reads ``/proc`` every ``every`` seconds (a
    worker's peak is kept by the kernel, so a sample any time before it exits sees it)."""

    def __init__(self, jvm_pid: int, every: float = 0.1) -> None:
        import threading

        self.jvm_pid = jvm_pid
        self.every = every
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="w5m-worker-peak", daemon=True)

    def __enter__(self) -> WorkerPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _descends(self, pid: int) -> bool:
        for _ in range(8):
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])  # the parent
            if pid == self.jvm_pid:
                return True
            if pid <= 1:
                return False
        return False

    def _sample(self) -> None:
        me = str(os.getpid())
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read()
                if b"pyspark.daemon" not in cmd and b"pyspark.worker" not in cmd \
                        or not self._descends(int(pid)):
                    continue
                with open(f"/proc/{pid}/status", encoding="ascii") as fh:
                    for line in fh:
                        if line.startswith("VmHWM:"):
                            self.peak_kb = max(self.peak_kb, int(line.split()[1]))
            except (OSError, ValueError):
                continue


def run_w5_memory(n: int, scales: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    """The compiled W5 job over ``n``, ``2n`` and ``4n`` views, each in a new SparkSession (new
    Python workers); one line with the peak RSS of the Python workers at each size, and the
    ratio of the largest to the smallest (the issue's bound: at most 1.2)."""
    peaks: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for scale in scales:
        data_dir = w5_data(n * scale)
        spark = w5_session()
        out_dir = tempfile.mkdtemp(prefix="out-", dir=_tmp_root())
        try:
            compiled_job(spark, w5_data(min(n, WARMUP_ROWS), seed=SEED + 1),
                         os.path.join(out_dir, "warm"))
            jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
            with WorkerPeak(int(jvm)) as peak:
                seconds[f"{scale}x"], _ = timed(functools.partial(
                    compiled_job, spark, data_dir, os.path.join(out_dir, "run")))
            panes = read_panes(os.path.join(out_dir, "run"))
            assert sum(panes.values()) == n * scale, "W5M: the panes do not count every view"
        finally:
            spark.stop()
            shutil.rmtree(out_dir, ignore_errors=True)
            shutil.rmtree(data_dir, ignore_errors=True)
        peaks[f"{scale}x"] = round(peak.peak_kb / 1024.0, 1)
        _progress(f"W5M {scale}x: {n * scale:,} views in {seconds[f'{scale}x']:.1f} s, Python "
                  f"worker peak RSS {peaks[f'{scale}x']} MB")
    first, last = f"{scales[0]}x", f"{scales[-1]}x"
    line = {"workload": "W5M", "params": {"messages_1x": n, "files": FILES,
                                          "partitions": PARTITIONS, "master": "local[2]"},
            "python_worker_peak_rss_mb": peaks, "seconds": seconds,
            "msgs_per_s": {k: round(n * int(k[:-1]) / s, 1) for k, s in seconds.items()},
            "peak_ratio": round(peaks[last] / peaks[first], 3) if peaks[first] else None}
    print(json.dumps(line), flush=True)
    return line
