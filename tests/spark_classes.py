"""The JVM options the test suite starts Spark's JVMs with, and the class archive they read.

A Spark JVM in the tests lives for seconds: a session, a few small jobs. At its start the JVM
loads, verifies and interprets some twenty thousand classes, and its optimizing compiler works
on code that will run a few times: about 12 to 16 s of CPU before the session is up and 9 to 10
more for the first job, on the two-core machine (`-XX:TieredStopAtLevel=1`, the client
compiler only, halves that; a class archive of the classes such a run loads halves it again:
about 4 s and 3 s). The tests start dozens of such JVMs (each ``samza-dsl reprocess`` of the
CLI tests, the cluster's drivers, the docs' examples), beside the Kafka tests on the same two
cores. The Kafka brokers of the tests start the same way (``apache_kafka.QUICK_START``).

``python tests/spark_classes.py`` (run by ``./dev setup``) writes the archive, ``ARCHIVE``: a
dynamic class-data-sharing archive that the JVM dumps as it exits from a small reprocessing
run (``-XX:ArchiveClassesAtExit``). It belongs to one JDK and one set of Spark's jars: a JVM
of another finds it does not match and runs without it. ``tests/conftest.py`` gives
``java_options()`` to every Spark JVM the tests start, in-process or in a subprocess, through
``SPARK_SUBMIT_OPTS``. Nothing of this reaches a user's job: the runtime's defaults stay the
JVM's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: where ``./dev setup`` writes the archive (beside the project's virtual environment)
ARCHIVE = REPO / ".venv" / "spark-classes.jsa"
#: the client compiler only; the JVM's own warnings on standard error (where the runtime reads
#: them, ``runtime.spark.jvm``), never on standard output, which the CLI tests read
QUICK = ["-XX:TieredStopAtLevel=1", "-Xlog:disable", "-Xlog:all=warning:stderr"]


def java_options(archive: Path = ARCHIVE) -> str:
    """The options of a Spark JVM the tests start: ``QUICK``, and the archive where it exists."""
    options = list(QUICK)
    if archive.is_file():
        options.append(f"-XX:SharedArchiveFile={archive}")
    return " ".join(options)


def _dump(archive: Path) -> None:
    """In this process: a Spark session that reprocesses the example with the archive dumped
    at the JVM's exit."""
    sys.path.insert(0, str(REPO))
    from examples.reprocess_page_views import app, write_jsonl
    from runtime.spark import SparkRunner, spark_session

    with tempfile.TemporaryDirectory() as tmp:
        views = Path(tmp) / "views.jsonl"
        write_jsonl(views, 2000)
        spark = spark_session("local[2]", "samza-dsl-class-archive", conf={
            "spark.driver.extraJavaOptions": " ".join(
                [*QUICK, f"-XX:ArchiveClassesAtExit={archive}"])})
        SparkRunner(spark).reprocess(app, {"page-views": str(views)},
                                     outputs={"country-counts": str(Path(tmp) / "out")})
        from pyspark import SparkContext

        jvm = SparkContext._gateway.proc
        spark.stop()
        jvm.stdin.close()  # the JVM exits at the end of its input, and writes the archive
        jvm.wait(timeout=600)


def main() -> int:
    """Writes ``ARCHIVE`` (in a child process: the JVM writes it as it exits)."""
    if len(sys.argv) > 1 and sys.argv[1] == "--dump":
        _dump(Path(sys.argv[2]))
        return 0
    partial = ARCHIVE.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    done = subprocess.run([sys.executable, __file__, "--dump", str(partial)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False)
    if done.returncode != 0 or not partial.is_file():
        sys.stderr.write(f"no Spark class archive was written (the tests run without it):\n"
                         f"{done.stderr[-2000:]}\n")
        return 0
    partial.replace(ARCHIVE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
