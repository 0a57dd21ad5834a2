"""W1 through Kafka on Kafka Streams: the Java class ``KafkaStreamsW1``
(``benchmarks/peers/kafka-streams/``, built by ``benchmarks/peers/install.py kafka-streams``)
in a JVM of its own, against a broker and an input topic already loaded.

    .venv/bin/python -m benchmarks.peers.run_kafka_streams HOST:PORT INPUT OUTPUT N \
        [at-least-once|exactly-once]

Prints the class's JSON line (messages, seconds, msgs_per_s, first_record_seconds, ...) with
``process_seconds``: the JVM's whole life, from its launch to its exit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from benchmarks.peers.install import KAFKA_STREAMS, VENVS, kafka_streams_classpath

__all__ = ["GUARANTEES", "installed", "run"]

#: samza-dsl's ``job.processing.guarantee`` values and Kafka Streams' own
GUARANTEES = {"at-least-once": "at_least_once", "exactly-once": "exactly_once_v2"}


def installed() -> bool:
    return os.path.isfile(os.path.join(VENVS, KAFKA_STREAMS, "w1-kafka-streams.jar"))


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.isfile(os.path.join(home, "bin", "java")):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if found is None:
        raise SystemExit("kafka-streams: no java on this machine (JDK 17 or newer)")
    return found


def run(bootstrap: str, events: str, out: str, n: int, guarantee: str = "at-least-once",
        timeout: float = 900) -> dict[str, Any]:
    """One run of the Kafka Streams peer (a fresh application id and state dir); its line."""
    if not installed():
        raise SystemExit("kafka-streams is not built: run "
                         f"{os.path.relpath(sys.executable)} benchmarks/peers/install.py "
                         f"kafka-streams")
    state_dir = tempfile.mkdtemp(prefix="kafka-streams-w1-")
    app_id = f"ks-w1-{uuid.uuid4().hex[:8]}"
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [_java(), "-cp", kafka_streams_classpath(), "KafkaStreamsW1", bootstrap, events,
             out, str(n), app_id, state_dir, GUARANTEES[guarantee]],
            capture_output=True, text=True, timeout=timeout)
        process_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"kafka-streams W1 failed ({proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    line: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    line["process_seconds"] = round(process_s, 4)
    line["application_id"] = app_id
    return line


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]),
                         sys.argv[5] if len(sys.argv) > 5 else "at-least-once")), flush=True)
