"""Starting Spark's JVM quietly: no start-up warnings on standard error (a red block in a
notebook, lines above the progress in a terminal).

``start_quietly(conf)`` launches the JVM that PySpark talks to, once per process, with

- its log4j2 log at FATAL: no "Using Spark's default log4j profile" or "Setting default log
  level" banner, no WARN about native Hadoop libraries or the loopback address, and no executor
  task tracebacks over a failed run's one error (the error itself is raised in Python);
- its standard error read by a thread that drops the JVM's own start-up notice about incubator
  modules (which no setting turns off) and passes every other line on, so nothing the JVM says
  later is lost.

A ``PYSPARK_SUBMIT_ARGS`` of the user's (their own log4j configuration, say) or a JVM that runs
already (``PYSPARK_GATEWAY_PORT``, a SparkContext made before) is left as it is.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
from typing import IO, Any

__all__ = ["start_quietly", "LOG4J2"]

LOG4J2 = """\
rootLogger.level = fatal
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# a logger of Spark's own at the root's level: no "Setting default log level" banner
logger.apache.name = org.apache
logger.apache.level = fatal
"""

#: lines the JVM writes at start-up whatever the log configuration says
_NOTICES = (b"WARNING: Using incubator modules",)


def _forward(stream: IO[bytes]) -> None:
    """The JVM's standard error, less its start-up notices, to this process's."""
    with contextlib.suppress(Exception):
        for line in iter(stream.readline, b""):
            if not line.startswith(_NOTICES):
                os.write(2, line)


def start_quietly(conf: Any) -> None:
    """Launch the JVM for a SparkContext with ``conf`` (a ``SparkConf``), quietly (see the module
    docstring); nothing when one runs already or the user's ``PYSPARK_SUBMIT_ARGS`` says how."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ \
            or "PYSPARK_SUBMIT_ARGS" in os.environ:
        return
    fd, log_conf = tempfile.mkstemp(prefix="samza-dsl-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(LOG4J2)
    os.environ["PYSPARK_SUBMIT_ARGS"] = (f"--driver-java-options "
                                         f"-Dlog4j2.configurationFile={log_conf} pyspark-shell")
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    finally:
        del os.environ["PYSPARK_SUBMIT_ARGS"]
        with contextlib.suppress(OSError):
            os.unlink(log_conf)  # the JVM read it as it started
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.stderr is not None:
        threading.Thread(target=_forward, args=(proc.stderr,), name="samza-dsl-jvm-stderr",
                         daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway)
