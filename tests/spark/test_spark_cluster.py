"""Reprocessing on a Spark standalone cluster (a master and a worker on 127.0.0.1, started from
the installed pyspark: fixture ``spark_cluster``), as users deploy it: ``samza-dsl reprocess
--master spark://...`` from a directory of its own, with relative paths, and the application in
a script, in an importable package that is not installed, and in a module next to the working
directory (``python -c``). Each output is byte for byte the one ``local[2]`` writes of the
same input (``local_answer``: ``samza-dsl reprocess --master local[2]``, run once for them all).

The package and the module next to the working directory are copies of
``examples/reprocess_page_views.py`` whose output says whether the executor imported them from
the zip the driver shipped (``from_zip``): executors on other hosts have nothing else.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.spark_classes import java_options

REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "samza-dsl"
EXAMPLE = REPO / "examples" / "reprocess_page_views.py"
# the worker has 1 GB and 2 cores: one executor of both
CLUSTER_CONF = ["--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2",
                # the executors' JVMs start as the tests' other Spark JVMs do
                "--conf", f"spark.executor.extraJavaOptions={java_options()}"]



def _env(*paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(REPO),
                                         *filter(None, [env.get("PYTHONPATH")])])
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _reprocess(app: str, master: str, out: str, cwd: Path, env: dict[str, str]) -> None:
    assert CLI.exists(), f"the samza-dsl console script is not installed next to {sys.executable}"
    _run([str(CLI), "reprocess", app, "--no-progress", "--master", master,
          "--input", "page-views=views.parquet", "--output", f"country-counts={out}",
          *(CLUSTER_CONF if master.startswith("spark://") else [])], cwd, env)


def _parts(path: Path) -> list[tuple[str, bytes]]:
    """The part files of an output directory, by name, with their bytes."""
    assert path.is_dir(), f"{path} was not written"
    return [(f.name, f.read_bytes()) for f in sorted(path.iterdir())
            if f.is_file() and not f.name.startswith((".", "_"))]


def _lines(path: Path) -> list[str]:
    return [ln for _, data in _parts(path) for ln in data.decode().splitlines() if ln]


def _work(tmp_path: Path, n: int = 6000) -> Path:
    """A working directory with ``views.parquet`` (two files, so two source partitions)."""
    spec = importlib.util.spec_from_file_location("_cluster_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    views = example.sample_input(n, seed=3)
    work = tmp_path / "work"
    (work / "views.parquet").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(views[: n // 2]), work / "views.parquet" / "a.parquet")
    pq.write_table(pa.Table.from_pylist(views[n // 2:]), work / "views.parquet" / "b.parquet")
    (work / "out").mkdir()
    return work


@pytest.fixture(scope="module")
def local_answer(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, bytes]]:
    """What ``samza-dsl reprocess --master local[2]`` writes of the example on ``_work``'s
    input: the answer every run on the cluster must give (the copies' marks taken out)."""
    work = _work(tmp_path_factory.mktemp("local"))
    _reprocess(str(EXAMPLE) + ":app", "local[2]", "out/local.jsonl", work, _env())
    assert len(_lines(work / "out" / "local.jsonl")) >= 12  # 6 countries, 2 minutes
    return _parts(work / "out" / "local.jsonl")


def _unmarked(path: Path) -> list[tuple[str, bytes]]:
    """``_parts`` without the ``from_zip`` marks."""
    return [(name, re.sub(rb',"from_zip":(true|false)', b"", data)) for name, data in _parts(path)]


def _shipped_copy(target: Path) -> None:
    """The example, whose output records whether this module came from a zip."""
    source = EXAMPLE.read_text()
    marked = source.replace('"views": pane.message})',
                            '"views": pane.message, "from_zip": ".zip" in __file__})')
    assert marked != source
    target.write_text(marked)


def test_a_script_on_the_cluster_writes_what_local_writes(
        spark_cluster: Any, local_answer: list[tuple[str, bytes]], tmp_path: Path) -> None:
    work = _work(tmp_path)
    # relative paths: resolved in the working directory of the driver, not of the executors
    _reprocess(str(EXAMPLE) + ":app", spark_cluster.url, "out/cluster.jsonl", work, _env())
    assert _parts(work / "out" / "cluster.jsonl") == local_answer
    assert "app-" in spark_cluster.log("master")  # the cluster ran it, not a local session


def test_an_importable_package_is_shipped_to_the_executors(
        spark_cluster: Any, local_answer: list[tuple[str, bytes]], tmp_path: Path) -> None:
    work = _work(tmp_path)
    lib = tmp_path / "lib"  # on the driver's path, not installed
    (lib / "viewjobs").mkdir(parents=True)
    (lib / "viewjobs" / "__init__.py").write_text("")
    _shipped_copy(lib / "viewjobs" / "counts.py")
    _reprocess("viewjobs.counts:app", spark_cluster.url, "out/cluster.jsonl", work, _env(lib))
    assert _unmarked(work / "out" / "cluster.jsonl") == local_answer
    lines = _lines(work / "out" / "cluster.jsonl")
    assert lines and all('"from_zip":true' in ln for ln in lines), lines[:3]


def test_a_module_next_to_the_working_directory_is_shipped(
        spark_cluster: Any, local_answer: list[tuple[str, bytes]], tmp_path: Path) -> None:
    """``python -c`` (as a notebook or a REPL): the module is found through ``''`` on the
    driver's path, which means another directory in an executor."""
    work = _work(tmp_path)
    _shipped_copy(work / "nextjob.py")
    code = textwrap.dedent("""
        import sys
        import nextjob
        from runtime.spark import SparkRunner

        runner = SparkRunner(master=sys.argv[1], conf=dict(a.split("=", 1) for a in sys.argv[3:]))
        runner.reprocess(nextjob.app, {"page-views": "views.parquet"},
                         outputs={"country-counts": sys.argv[2]})
        runner.stop()
    """)
    conf = [a for a in CLUSTER_CONF if a != "--conf"]
    _run([sys.executable, "-c", code, spark_cluster.url, "out/cluster.jsonl", *conf], work,
         _env())
    # local[2]'s Python workers run in the driver's directory, where '' finds the module
    # itself: only the cluster's answer says where an executor elsewhere gets it
    assert _unmarked(work / "out" / "cluster.jsonl") == local_answer
    lines = _lines(work / "out" / "cluster.jsonl")
    assert lines and all('"from_zip":true' in ln for ln in lines), lines[:3]


def test_a_driver_script_under_spark_submit(
        spark_cluster: Any, local_answer: list[tuple[str, bytes]], tmp_path: Path) -> None:
    """As the README shows: the package goes with ``--py-files``, and ``SparkRunner()`` takes
    the master spark-submit was given."""
    work = _work(tmp_path)
    lib = tmp_path / "lib"
    (lib / "viewjobs").mkdir(parents=True)
    (lib / "viewjobs" / "__init__.py").write_text("")
    _shipped_copy(lib / "viewjobs" / "counts.py")
    with zipfile.ZipFile(work / "jobs.zip", "w") as z:
        for f in ("__init__.py", "counts.py"):
            z.write(lib / "viewjobs" / f, f"viewjobs/{f}")
    (work / "reprocess_views.py").write_text(textwrap.dedent("""
        from runtime.spark import SparkRunner
        from viewjobs.counts import app

        result = SparkRunner().reprocess(app, {"page-views": "views.parquet"},
                                         outputs={"country-counts": "out/submitted.jsonl"})
        print(result.summary())
    """))
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**_env(), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    apps_before = spark_cluster.log("master").count("Registered app")
    proc = _run([str(submit), "--master", spark_cluster.url, "--py-files", "jobs.zip",
                 *CLUSTER_CONF, "reprocess_views.py"], work, env)
    assert "reprocessed 'country-views-1'" in proc.stdout, proc.stdout
    assert spark_cluster.log("master").count("Registered app") == apps_before + 1
    assert _unmarked(work / "out" / "submitted.jsonl") == local_answer
    lines = _lines(work / "out" / "submitted.jsonl")
    assert lines and all('"from_zip":true' in ln for ln in lines), lines[:3]


def test_an_executor_failure_is_one_line_naming_stream_operator_and_cause(
        spark_cluster: Any, tmp_path: Path) -> None:
    work = _work(tmp_path, 2000)
    source = EXAMPLE.read_text()
    failing = source.replace('    return not view.get("bot", False)\n',
                             '    if view["user"] == "user-7":\n'
                             '        raise MemoryError("no room for user-7")\n'
                             '    return not view.get("bot", False)\n')
    assert failing != source
    (work / "failing.py").write_text(failing)
    proc = subprocess.run([str(CLI), "reprocess", "failing.py:app", "--no-progress",
                           "--master", spark_cluster.url, *CLUSTER_CONF,
                           "--input", "page-views=views.parquet",
                           "--output", "country-counts=out/counts.jsonl"],
                          cwd=work, env=_env(), capture_output=True, text=True, timeout=240,
                          check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines()
             if ln.strip() and not ln.startswith("WARNING: Using incubator modules")]
    assert len(lines) == 1, proc.stderr[-3000:]
    line = lines[0]
    assert line.startswith("samza-dsl reprocess: error: "), line
    assert "operator 'country-views-1-filter-humans'" in line, line
    assert "stream 'page-views'" in line and "views.parquet" in line, line
    assert "MemoryError: no room for user-7" in line, line
    assert "saveAsTextFile" not in line and "o7" not in line, line
    assert not (work / "out" / "counts.jsonl").exists()


@pytest.mark.parametrize("missing", ["java"])
def test_the_cluster_fixture_fails_without_java(tmp_path: Path, missing: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import standalone

    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert shutil.which(missing) is None
    with pytest.raises(RuntimeError, match="needs Java"):
        standalone.start(tmp_path / "cluster")
