"""Starting Spark's JVM quietly: no start-up warnings on standard error (a red block in a
notebook, lines above the progress in a terminal).

``start_quietly(conf)`` launches the JVM that PySpark talks to, once per process, with

- its log4j2 log at FATAL: no "Using Spark's default log4j profile" or "Setting default log
  level" banner, no WARN about native Hadoop libraries or the loopback address, and no executor
  task tracebacks over a failed run's one error (the error itself is raised in Python);
- its standard error read by a thread from the start: it drops the JVM's own start-up notice
  about incubator modules (which no setting turns off) and passes every other line on, so
  nothing the JVM says later is lost. A JVM that exits before PySpark can talk to it (a master
  Spark does not know, no Java at JAVA_HOME) is a ``SparkStartError`` that names the master and
  gives the JVM's last lines, its own reason, not PySpark's ``JAVA_GATEWAY_EXITED``.

A ``PYSPARK_SUBMIT_ARGS`` of the user's (their own log4j configuration, say) or a JVM that runs
already (``PYSPARK_GATEWAY_PORT``, a SparkContext made before) is left as it is.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import tempfile
import threading
from collections import deque
from typing import Any

from samza_dsl.errors import SparkStartError

__all__ = ["start_quietly", "submit_args", "LOG4J2"]

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


class _Stderr:
    """The JVM's standard error, read from its start: lines are kept (the last ``keep``) until
    ``forward()``, then written to this process's standard error, the start-up notices left
    out."""

    def __init__(self, keep: int = 200) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.lines: deque[bytes] = deque(maxlen=keep)
        self._forwarding = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="samza-dsl-jvm-stderr",
                                        daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception), os.fdopen(self.read_fd, "rb") as stream:
            for line in iter(stream.readline, b""):
                with self._lock:
                    if not self._forwarding:
                        self.lines.append(line)
                        continue
                if not line.startswith(_NOTICES):
                    os.write(2, line)

    def launched(self) -> None:
        """The JVM holds the pipe's other end now: close this process's."""
        with contextlib.suppress(OSError):
            os.close(self.write_fd)

    def forward(self) -> None:
        """From now on pass the JVM's lines on, those kept first."""
        with self._lock:
            self._forwarding = True
            for line in self.lines:
                if not line.startswith(_NOTICES):
                    os.write(2, line)
            self.lines.clear()

    def reason(self, timeout: float = 5.0) -> str:
        """The last meaningful lines of a JVM that exited: no notices, stack frames or blank
        lines, at most three, joined into one line."""
        self._thread.join(timeout)  # to the end of what it wrote
        with self._lock:
            lines = [ln.decode(errors="replace").strip() for ln in self.lines]
        meaningful = [ln for ln in lines if ln and not ln.startswith(("at ", "...", "WARNING: "))
                      and not ln.startswith(tuple(n.decode() for n in _NOTICES))]
        return " / ".join(meaningful[-3:])


def submit_args(java_options: str | None, log_conf: str) -> str:
    """The ``PYSPARK_SUBMIT_ARGS`` that start the driver's JVM with the log configuration
    ``log_conf``. spark-submit's ``--driver-java-options`` takes the place of a
    ``spark.driver.extraJavaOptions`` setting, so the user's ``java_options`` go first in it (the
    user's own log4j2 configuration, if they name one, stays theirs).

    >>> submit_args(None, "/tmp/l.properties")
    '--driver-java-options -Dlog4j2.configurationFile=/tmp/l.properties pyspark-shell'
    >>> shlex.split(submit_args("-Xss4m -Da='b c'", "/tmp/l.properties"))
    ['--driver-java-options', "-Xss4m -Da='b c' -Dlog4j2.configurationFile=/tmp/l.properties", 'pyspark-shell']
    >>> submit_args("-Dlog4j2.configurationFile=mine.xml", "/tmp/l.properties")
    '--driver-java-options -Dlog4j2.configurationFile=mine.xml pyspark-shell'
    """
    options = (java_options or "").strip()
    if "log4j2.configurationFile" not in options:
        options = f"{options} -Dlog4j2.configurationFile={log_conf}".strip()
    return f"--driver-java-options {shlex.quote(options)} pyspark-shell"


def start_quietly(conf: Any) -> None:
    """Launch the JVM for a SparkContext with ``conf`` (a ``SparkConf``), quietly (see the module
    docstring); nothing when one runs already or the user's ``PYSPARK_SUBMIT_ARGS`` says how.
    Raises ``SparkStartError`` when the JVM exits before it is up."""
    from pyspark import SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ \
            or "PYSPARK_SUBMIT_ARGS" in os.environ:
        return
    fd, log_conf = tempfile.mkstemp(prefix="samza-dsl-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(LOG4J2)
    os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args(
        conf.get("spark.driver.extraJavaOptions", None), log_conf)
    stderr = _Stderr()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": stderr.write_fd})
    except (PySparkRuntimeError, OSError) as exc:
        stderr.launched()
        master = conf.get("spark.master", "local[*]")
        reason = stderr.reason() or str(exc)
        raise SparkStartError(f"Spark did not start (master {master!r}): {reason}. Check the "
                              f"master (local[N], spark://HOST:PORT, yarn, k8s://...) and that "
                              f"Java 17 or later is installed (JAVA_HOME, or java on PATH)",
                              master=master, reason=reason) from None
    finally:
        stderr.launched()
        del os.environ["PYSPARK_SUBMIT_ARGS"]
        with contextlib.suppress(OSError):
            os.unlink(log_conf)  # the JVM read it as it started
    stderr.forward()
    SparkContext._ensure_initialized(gateway=gateway)
