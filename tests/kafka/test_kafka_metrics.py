"""The metrics reporters of a job on the real (tansu) broker: the snapshot reporter writes to
the topic ``<job>-metrics``, which ``samza-dsl dump`` reads, with the run's totals last."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

from kafka_helpers import APP_HEAD, BIN, CLI

APP = APP_HEAD + '''app = StreamApplication("kmx-" + TAG, config={"job.default.system": "kafka",
                                              "task.commit.ms": 100,
                                              "metrics.reporters": "snapshot",
                                              "metrics.reporter.interval.ms": 100})
serde = KVSerde(StringSerde(), JsonSerde())
events = app.input(kafka.input("events", serde=serde, partitions=2,
                               physical_name="events-" + TAG))
out = app.output(kafka.output("out", serde=serde, partitions=2, physical_name="out-" + TAG))
events.filter(lambda kv: kv.value["i"] % 2 == 0, name="even").send_to(out)
'''


def test_kafka_snapshot_reporter_writes_the_metrics_topic(kafka_bootstrap: str,
                                                          tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    job = f"kmx-{tag}-1"
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "TEST_KAFKA": kafka_bootstrap, "TEST_TAG": tag,
           "PATH": f"{BIN}:{os.environ['PATH']}"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([CLI, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr
        return proc

    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"key": f"k{i % 7}", "value": {"i": i}}) + "\n" for i in range(200)))
    cli("load", "app.py:app", "events", "in.jsonl")
    cli("run", "app.py:app", "-q")
    lines = cli("dump", "app.py:app", f"{job}-metrics").stdout.splitlines()
    snaps = [json.loads(line) for line in lines]
    assert snaps, "no snapshot on the metrics topic"
    last = snaps[-1]
    assert last["header"]["job-name"] == job
    assert last["header"]["container-name"] == "container"
    ins = sum(m["value"] for m in last["metrics"]
              if m["group"] == "operator" and m["name"] == "messages-in"
              and m["labels"]["operator"] == f"{job}-filter-even")
    outs = sum(m["value"] for m in last["metrics"]
               if m["group"] == "operator" and m["name"] == "messages-out"
               and m["labels"]["operator"] == f"{job}-filter-even")
    assert (ins, outs) == (200, 100)
    lag = [m["value"] for m in last["metrics"] if m["name"] == "lag"]
    assert lag and set(lag) == {0}
    sends = next(m["value"] for m in last["metrics"]
                 if (m["group"], m["name"]) == ("producer", "sends"))
    assert sends >= 100
