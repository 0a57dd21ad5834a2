"""Apache Samza 1.8.0 itself, run from the tests: the harness in ``harness/`` (a Maven module of
Java high-level applications, each the counterpart of a pipeline in ``pipelines.py``) runs a
named application on Samza's own ``TestRunner`` (samza-test), in memory, in one JVM.

``./dev setup`` compiles it into ``harness/target`` and writes its class path beside it.
``SamzaHarness`` starts the entry point once (``dev.samzadsl.parity.Main serve``: the JVM's start
costs seconds, a run a fraction of one) and hands it one case a line: the pipeline's name, the
partition count of each of its streams, its config and its input messages; it answers with every
output message, partition by partition, in offset order. A missing Java, or a harness not
built or older than its sources, fails the test with what to run: these tests never skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

HARNESS = Path(__file__).parent / "harness"
CLASSES = HARNESS / "target" / "classes"
CLASS_PATH = HARNESS / "target" / "classpath.txt"
MAIN = "dev.samzadsl.parity.Main"


class Message(NamedTuple):
    """A message of a stream as the harness reads and writes it (a line of JSON)."""

    stream: str
    partition: int
    key: str | None
    value: Any


class SamzaError(AssertionError):
    """Samza failed to run a case, or the harness cannot start."""


def check_built() -> str:
    """The harness's class path, once Java and a harness as new as its sources are there."""
    if shutil.which("java") is None:
        raise SamzaError("no java on PATH: the Samza parity tests need Java 17 (./dev setup "
                         "installs it)")
    if not CLASS_PATH.exists() or not CLASSES.exists():
        raise SamzaError(f"the Samza harness is not built ({CLASS_PATH} is missing): run "
                         f"./dev setup")
    built = CLASS_PATH.stat().st_mtime
    sources = [HARNESS / "pom.xml", *(HARNESS / "src").rglob("*")]
    stale = [p for p in sources if p.is_file() and p.stat().st_mtime > built]
    if stale:
        raise SamzaError(f"the Samza harness is older than {stale[0].relative_to(HARNESS)}: "
                         f"run ./dev setup to build it again")
    return f"{CLASSES}{os.pathsep}{CLASS_PATH.read_text().strip()}"


class SamzaHarness:
    """One JVM running Samza's TestRunner on the cases ``run`` hands it, one at a time."""

    def __init__(self) -> None:
        class_path = check_built()
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in close())
            prefix="samza-parity-", suffix=".log", delete=False)
        self._proc = subprocess.Popen(
            ["java", "-Xss4m", "-cp", class_path, MAIN, "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            encoding="utf-8", bufsize=1)

    def run(self, pipeline: str, partitions: Mapping[str, int], messages: Iterable[Message],
            config: Mapping[str, Any] | None = None) -> list[Message]:
        """Every output message of ``pipeline`` run on Samza over ``messages``.

        Args:
            pipeline: The Java class's name in ``harness/``.
            partitions: The partition count of each input and output stream.
            messages: The input, each message in the partition it names, in order.
            config: Samza config for the run (the same keys samza-dsl is given).
        """
        case = {"pipeline": pipeline, "partitions": dict(partitions),
                "config": {k: str(v) for k, v in (config or {}).items()},
                "messages": [m._asdict() for m in messages]}
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps(case) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise SamzaError(f"the Samza harness ended (exit {self._proc.poll()}); its log:\n"
                             f"{self._tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise SamzaError(f"Samza failed to run {pipeline}: {answer['error']}")
        return [Message(**m) for m in answer["messages"]]

    def _tail(self, n: int = 4000) -> str:
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-n:]

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._log.close()
        os.unlink(self._log.name)
