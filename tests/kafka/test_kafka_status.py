"""``samza-dsl status`` on a job whose streams are topics of the real (tansu) broker, through the
CLI: a job that never ran and brokers that do not answer are clear errors; after a run, every
partition's checkpoint with lag 0 and its age, the store's files here and its changelog topic,
the generation; lag after a ``load``; a container running here shows with its PID, and the
containers elsewhere are said to be beyond sight."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from kafka_helpers import APP_HEAD, BIN, CLI, free_port

APP = APP_HEAD + '''app = StreamApplication("kst-" + TAG, config={"job.default.system": "kafka",
                                              "task.commit.ms": 100})
serde = KVSerde(StringSerde(), JsonSerde())
events = app.input(kafka.input("events", serde=serde, partitions=2,
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


events.map(Count(), name="count").send_to(counts)
'''


class Job:
    """The application above in ``tmp_path``, with a tag of its own, and the CLI on it."""

    def __init__(self, tmp_path: Path, bootstrap: str) -> None:
        self.dir = tmp_path
        self.tag = uuid.uuid4().hex[:8]
        self.name = f"kst-{self.tag}-1"
        (tmp_path / "app.py").write_text(APP)
        self.env = {**os.environ, "TEST_KAFKA": bootstrap, "TEST_TAG": self.tag,
                    "PATH": f"{BIN}:{os.environ['PATH']}"}

    def cli(self, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CLI, *args], cwd=self.dir, env=env or self.env,
                              capture_output=True, text=True, timeout=180)

    def ok(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.cli(*args)
        assert proc.returncode == 0, proc.stderr
        return proc

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.ok("status", "app.py:app", "--json").stdout)
        return out

    def load(self, name: str, start: int, n: int) -> None:
        path = self.dir / name
        path.write_text("".join(json.dumps({"key": f"k{i % 5}", "value": {"i": i}}) + "\n"
                                for i in range(start, start + n)))
        self.ok("load", "app.py:app", "events", name)


def test_kafka_status_errors(kafka_bootstrap: str, tmp_path: Path) -> None:
    job = Job(tmp_path, kafka_bootstrap)
    never = job.cli("status", "app.py:app")
    assert never.returncode == 2, never.stderr
    assert f"job '{job.name}' has not run on the Kafka brokers at {kafka_bootstrap}" \
        in never.stderr, never.stderr
    assert f"__samza_checkpoint_{job.name}" in never.stderr
    assert "samza-dsl run app.py:app" in never.stderr

    away = f"127.0.0.1:{free_port()}"
    gone = job.cli("status", "app.py:app", env={**job.env, "TEST_KAFKA": away})
    assert gone.returncode == 2, gone.stderr
    assert f"cannot reach the Kafka brokers at {away}" in gone.stderr, gone.stderr
    assert "check bootstrap_servers" in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1, gone.stderr


def test_kafka_status_after_a_run_a_load_and_beside_a_running_container(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    job = Job(tmp_path, kafka_bootstrap)
    job.load("first.jsonl", 0, 30)
    started = time.time()
    job.ok("run", "app.py:app", "-q")

    s = job.status()
    assert s["version"] == 1 and s["system"] == "kafka" and s["job"] == job.name
    assert s["bootstrap_servers"] == kafka_bootstrap
    assert s["generation"] == 1 and s["elasticity_factor"] == 1
    assert s["containers"] == [{"id": 0, "state": "unknown", "pid": None}]
    assert "cannot be seen" in s["containers_note"] and "consumer group" in s["containers_note"]
    assert s["checkpoints"]["where"] == f"topic __samza_checkpoint_{job.name}"
    assert started - 1 <= s["checkpoints"]["last_written"] <= time.time() + 1
    rows = s["partitions"]
    assert sorted((r["stream"], r["partition"]) for r in rows) == [("events", 0), ("events", 1)]
    assert sum(r["end_offset"] for r in rows) == 30
    for r in rows:
        assert r["checkpointed_offset"] == r["end_offset"] - 1 and r["lag"] == 0
        assert 0 <= r["checkpoint_age_seconds"] < 120
    (store,) = s["stores"]
    assert store["store"] == "totals" and store["exists"] and store["bytes"] > 0
    assert store["changelog"] == f"{job.name}-totals-changelog"
    assert store["changelog_offsets"] >= 5  # one entry per key at least

    text = job.ok("status", "app.py:app").stdout
    assert f"job {job.name} on Kafka at {kafka_bootstrap}" in text
    assert "container 0: unknown" in text and "cannot be seen" in text

    job.load("more.jsonl", 30, 12)
    s = job.status()
    assert sum(r["lag"] for r in s["partitions"]) == 12

    # a following run here: its container shows running with its PID
    proc = subprocess.Popen([CLI, "run", "app.py:app", "-q", "--follow"], cwd=tmp_path,
                            env=job.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            s = job.status()
            if s["containers"][0]["state"] == "running" and s["generation"] == 2 \
                    and sum(r["lag"] for r in s["partitions"]) == 0:
                break
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, s
            time.sleep(0.2)
        assert s["containers"] == [{"id": 0, "state": "running", "pid": proc.pid}]
        assert {"file": "job.lock", "pid": proc.pid, "doing": "run"} in s["locks"]
        assert f"container 0: running, pid {proc.pid}" in job.ok("status", "app.py:app").stdout
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), err
    s = job.status()
    assert s["containers"] == [{"id": 0, "state": "unknown", "pid": None}] and s["locks"] == []
