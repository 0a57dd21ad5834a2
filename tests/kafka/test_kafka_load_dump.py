"""The topics a job on the real (tansu) broker creates get its streams' retention:
``streams.<id>.retention.*`` as their topic configs ``retention.ms``/``retention.bytes``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from kafka_helpers import run

from runtime.loader import load_app

BIN = str(Path(sys.executable).parent)
CLI = os.path.join(BIN, "samza-dsl")

APP = '''
import os
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

TAG = os.environ["TEST_TAG"]
kafka = KafkaSystem("kafka", bootstrap_servers=os.environ["TEST_KAFKA"])
app = StreamApplication("kio-" + TAG, config={"job.default.system": "kafka",
                                              "task.commit.ms": 100})
serde = KVSerde(StringSerde(), JsonSerde())
events = app.input(kafka.input("events", serde=serde,
                               partitions=int(os.environ.get("TEST_PARTITIONS", "3")),
                               physical_name="events-" + TAG))
counts = app.output(kafka.output("counts", serde=serde, partitions=2,
                                 physical_name="counts-" + TAG))
app.table("totals", serde=serde)


class Count:
    def init(self, ctx):
        self.table = ctx.table("totals")

    def __call__(self, kv):
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, n)


events.partition_by(lambda kv: kv.value["g"], lambda kv: kv.value, name="by-g") \\
    .map(Count(), name="count").send_to(counts)
'''


class Job:
    """The application above in ``tmp_path``, with a tag of its own, and the CLI on it."""

    def __init__(self, tmp_path: Path, bootstrap: str, partitions: int = 3) -> None:
        self.dir = tmp_path
        self.tag = uuid.uuid4().hex[:8]
        self.name = f"kio-{self.tag}-1"
        self.bootstrap = bootstrap
        (tmp_path / "app.py").write_text(APP)
        self.env = {**os.environ, "TEST_KAFKA": bootstrap, "TEST_TAG": self.tag,
                    "TEST_PARTITIONS": str(partitions), "PATH": f"{BIN}:{os.environ['PATH']}"}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CLI, *args], cwd=self.dir, env=self.env, capture_output=True,
                              text=True, timeout=180)

    def ok(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.cli(*args)
        assert proc.returncode == 0, proc.stderr
        return proc

    def dump(self, stream: str, *args: str) -> list[object]:
        return [json.loads(line) for line in
                self.ok("dump", "app.py:app", stream, *args).stdout.splitlines()]

    def app(self, monkeypatch: pytest.MonkeyPatch) -> object:
        for k in ("TEST_KAFKA", "TEST_TAG", "TEST_PARTITIONS"):
            monkeypatch.setenv(k, self.env[k])
        return load_app(str(self.dir / "app.py") + ":app")


def _write(path: Path, rows: list[object], blank_after: int | None = None) -> Path:
    lines = [json.dumps(r, separators=(",", ":")) + "\n" for r in rows]
    if blank_after is not None:
        lines.insert(blank_after, "\n")  # a blank line is no message: later lines shift by one
    path.write_text("".join(lines))
    return path


# -- retention ------------------------------------------------------------------------------------


async def _topic_configs(bootstrap: str, name: str) -> dict[str, str]:
    """The explicitly set configs of a topic (all tansu's DescribeConfigs returns)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name)])
    finally:
        await admin.close()
    [resource] = response.to_object()["resources"]
    assert resource["error_code"] == 0, resource
    return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}


def test_topics_the_job_creates_get_the_streams_retention(kafka_bootstrap: str,
                                                          tmp_path: Path) -> None:
    job = Job(tmp_path, kafka_bootstrap)
    _write(tmp_path / "in.jsonl", [{"key": "k", "value": {"g": "a", "n": 1}}])
    middle = f"{job.name}-partition_by-by-g"
    config = ["-c", "streams.events.retention.ms=7200000",
              "-c", "streams.counts.retention.ms=3600000",
              "-c", "streams.counts.retention.bytes=1048576",
              "-c", f"streams.{middle}.retention.ms=600000"]
    job.ok("load", "app.py:app", "events", "in.jsonl", *config)  # load creates the input
    job.ok("run", "app.py:app", "-q", *config)  # the job creates the others
    assert run(_topic_configs(kafka_bootstrap, f"events-{job.tag}")) \
        .get("retention.ms") == "7200000"
    counts = run(_topic_configs(kafka_bootstrap, f"counts-{job.tag}"))
    assert counts.get("retention.ms") == "3600000" and counts.get("retention.bytes") == "1048576"
    assert run(_topic_configs(kafka_bootstrap, middle)).get("retention.ms") == "600000"
    # a stream without retention keys keeps the broker's defaults
    dead = run(_topic_configs(kafka_bootstrap, f"{job.name}-dead-letter"))
    assert "retention.ms" not in dead and "retention.bytes" not in dead
