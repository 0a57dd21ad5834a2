"""A Spark standalone cluster on 127.0.0.1, started from the installed pyspark's own launcher
(``bin/spark-class`` with ``SPARK_HOME`` at the pyspark package): one master and one worker, as
``start-master.sh`` and ``start-worker.sh`` would start them, each in a process of its own.

Ports are free ones picked here; the web UIs take any free port (0) and bind to 127.0.0.1, the
master's REST server is off, and the worker's directory is a temporary one. ``stop`` kills both
processes (and what the worker started). Without Java, ``start`` raises: Spark tests never skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.spark_classes import java_options

__all__ = ["StandaloneCluster", "start"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """A running master and worker; ``url`` is ``spark://127.0.0.1:PORT``."""

    url: str
    directory: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def log(self, name: str) -> str:
        path = self.directory / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def _launch(cluster: StandaloneCluster, name: str, *args: str) -> subprocess.Popen[bytes]:
    home = _spark_home()
    with open(cluster.directory / f"{name}.log", "wb") as log:
        proc = subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=cluster.env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cluster.directory, start_new_session=True)
    cluster.procs.append(proc)
    return proc


def _wait_for(cluster: StandaloneCluster, name: str, proc: subprocess.Popen[bytes], text: str,
              timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in cluster.log(name):
        if proc.poll() is not None:
            raise RuntimeError(f"the Spark {name} exited with code {proc.returncode}:\n"
                               f"{cluster.log(name)[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Spark {name} did not log {text!r} within {timeout:.0f} s:\n"
                               f"{cluster.log(name)[-3000:]}")
        time.sleep(0.2)


def start(directory: Path, *, cores: int = 2, memory: str = "1g",
          timeout: float = 90) -> StandaloneCluster:
    """Start a master and one worker (``cores``, ``memory``) with logs in ``directory``."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("a Spark standalone cluster needs Java: install a JDK (17 or 21) or "
                           "set JAVA_HOME")
    directory.mkdir(parents=True, exist_ok=True)
    conf_dir = directory / "conf"  # no spark-defaults.conf or spark-env.sh from elsewhere
    conf_dir.mkdir(exist_ok=True)
    work = directory / "work"
    work.mkdir(exist_ok=True)
    port = _free_port()
    env = {**os.environ, "SPARK_HOME": str(_spark_home()), "SPARK_CONF_DIR": str(conf_dir),
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(directory),
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
           "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false",
           # the master's and the worker's JVMs start as the tests' other Spark JVMs do
           "SPARK_DAEMON_JAVA_OPTS": java_options()}
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", directory, env)
    try:
        master = _launch(cluster, "master", "org.apache.spark.deploy.master.Master",
                         "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0")
        _wait_for(cluster, "master", master, "I have been elected leader", timeout)
        worker = _launch(cluster, "worker", "org.apache.spark.deploy.worker.Worker",
                         "--host", "127.0.0.1", "--webui-port", "0", "--cores", str(cores),
                         "--memory", memory, "--work-dir", str(work), cluster.url)
        _wait_for(cluster, "worker", worker, "Successfully registered with master", timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster
