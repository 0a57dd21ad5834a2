"""A job or a load on Kafka that fails closes what it opened (tansu on 127.0.0.1): its producer,
consumers and remote-table sessions, on every path, so no "Unclosed AIOKafkaProducer" or
"Unclosed client session" line follows its error. Real ``samza-dsl`` processes, with Python's
ResourceWarnings shown (as ``-W always::ResourceWarning`` would)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from kafka_helpers import create_topic, run

CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")

APP = textwrap.dedent('''
    import os

    from samza_dsl import KV, StreamApplication
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import KafkaSystem
    from samza_dsl.testing.kv_service import HttpKV

    SERDE = KVSerde(StringSerde(), JsonSerde())
    TAG = os.environ["TAG"]
    app = StreamApplication(f"closing-{TAG}", config={"task.commit.ms": 100})
    kafka = KafkaSystem("kafka", bootstrap_servers=os.environ["BOOT"])
    events = app.input(kafka.input("events", serde=SERDE, physical_name=f"events-{TAG}",
                                   partitions=2))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"out-{TAG}", partitions=2))
    HOW = os.environ["HOW"]


    class Lookup:
        """Opens the remote table in init; with HOW=init, then fails to start."""

        def init(self, ctx):
            self.names = ctx.table("names")
            self.names.get("u0")  # a call, and its client session, before anything runs
            if HOW == "init":
                raise RuntimeError("no settings for Lookup")

        def __call__(self, kv):
            if HOW == "map" and kv.value["i"] == 7:
                raise ValueError("seven")
            return kv


    kv = HttpKV(os.environ["KV_URL"])
    app.remote_table("names", read=kv.read)
    events.map(Lookup(), name="lookup").send_to(out)
''')


@pytest.fixture
def job(kafka_bootstrap: str, tmp_path: Path) -> dict[str, str]:
    from samza_dsl.testing.kv_service import KVService

    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "events.jsonl").write_text("".join(
        json.dumps({"key": str(i), "value": {"i": i}}) + "\n" for i in range(20)))
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"events-{tag}", 2))
    with KVService({"u0": "Ada"}) as service:
        yield {**os.environ, "BOOT": kafka_bootstrap, "TAG": tag, "KV_URL": service.url,
               "PYTHONWARNINGS": "always::ResourceWarning"}


def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_job_that_fails_to_start_closes_its_producer_and_sessions(
        job: dict[str, str], tmp_path: Path) -> None:
    assert cli({**job, "HOW": "ok"}, tmp_path, "load", "app.py:app", "events",
               "events.jsonl").returncode == 0
    proc = cli({**job, "HOW": "init"}, tmp_path, "run", "app.py:app", "-q")
    assert proc.returncode == 2, proc.stderr
    assert "Unclosed" not in proc.stderr and "unclosed" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"samza-dsl run: error: operator 'closing-{job['TAG']}-1-map-lookup' "
                           f"failed to start in task 'Partition ")
    assert "RuntimeError: no settings for Lookup" in line


@pytest.mark.parametrize("containers", [1, 2])
def test_a_job_that_fails_on_a_message_closes_its_producer_and_sessions(
        job: dict[str, str], tmp_path: Path, containers: int) -> None:
    proc = cli({**job, "HOW": "map"}, tmp_path, "run", "app.py:app", "-q",
               "--input", "events=events.jsonl", "--containers", str(containers))
    assert proc.returncode == 2, proc.stderr
    assert "Unclosed" not in proc.stderr and "unclosed" not in proc.stderr, proc.stderr
    assert "ValueError: seven" in proc.stderr


def test_a_load_that_fails_closes_its_clients(job: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"key": "1", "value": {"i": 1}}\n'
                                        '{"key": 2, "value": {"i": 2}}\n')
    proc = cli({**job, "HOW": "ok"}, tmp_path, "load", "app.py:app", "events", "bad.jsonl")
    assert proc.returncode == 2, proc.stderr
    assert "Unclosed" not in proc.stderr and "unclosed" not in proc.stderr, proc.stderr
    assert "bad.jsonl:2" in proc.stderr
