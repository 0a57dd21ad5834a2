"""A stream of the local log that another job creates again with another partition count while
a job runs (docs/kafka.md, "Partitions added to a topic"): the job stops within a second or so,
after a commit, with one line naming the stream and both counts, exit code 2.

A stream's count cannot change in the log: it changes only when the stream is deleted (another
job's ``reset --outputs`` or ``run --replace``) and created again. A job that reads the stream
stops at once when it is deleted (its reads find no stream); one that only writes it does not
read it, and before went on writing into the first 4 of its 8 partitions, where a reader
planned for 8 partitions does not look for those keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")

APPS = '''
from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

SERDE = KVSerde(StringSerde(), JsonSerde())
local = LocalSystem("local", path={log!r})


def copy(name, partitions):
    """events (``partitions`` partitions) -> out, the stream 'shared' (its count planned)."""
    app = StreamApplication(name, config={{"task.commit.ms": 200}})
    events = app.input(local.input("events", serde=SERDE, physical_name=name + "-in",
                                   partitions=partitions))
    out = app.output(local.output("out", serde=SERDE, physical_name="shared"))
    events.map(lambda kv: kv, name="same").send_to(out)
    return app


writer = copy("writer", 4)
other = copy("other", 8)
'''


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([CLI, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_a_stream_created_again_with_more_partitions_stops_the_job_writing_it(
        tmp_path: Path) -> None:
    (tmp_path / "apps.py").write_text(APPS.format(log=str(tmp_path / "log")))
    (tmp_path / "events.jsonl").write_text("".join(
        json.dumps({"key": f"k{i}", "value": {"i": i}}) + "\n" for i in range(20)))
    _cli(tmp_path, "load", "apps.py:writer", "events", "events.jsonl", "-c", "job.dir=w")
    proc = subprocess.Popen([CLI, "run", "apps.py:writer", "--follow", "-q", "-c", "job.dir=w",
                             "-c", "task.commit.ms=600000"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _copied(tmp_path) < 20:  # the writer copied its 20 events
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the writer did not copy its events"
            time.sleep(0.2)
        # another job whose output is the same stream deletes it, and makes it of 8 partitions
        _cli(tmp_path, "reset", "apps.py:other", "--outputs", "-c", "job.dir=o")
        _cli(tmp_path, "run", "apps.py:other", "-q", "--input", "events=events.jsonl",
             "-c", "job.dir=o")
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("the writer did not stop when its output was created again "
                                 "with 8 partitions") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, err
    assert "Traceback" not in err, err
    (line,) = [ln for ln in err.splitlines() if "partitions now" in ln]
    assert line.startswith("samza-dsl run: error: job 'writer-1': output stream 'out' (stream "
                           "'shared') has 8 partitions now, not the 4 the job was planned "
                           "with"), line
    assert "after committing what it had processed" in line and "samza-dsl reset APP" in line
    # the stop's commit (the only one: task.commit.ms is 10 minutes) covers the 20 events
    status = json.loads(_cli(tmp_path, "status", "apps.py:writer", "--json", "-c",
                             "job.dir=w").stdout)
    rows = [r for r in status["partitions"] if r["stream"] == "events"]
    assert sum(r["end_offset"] for r in rows) == 20, rows
    assert all(r["checkpointed_offset"] == r["end_offset"] - 1 for r in rows), rows


def _copied(tmp_path: Path) -> int:
    """The records in the stream 'shared'."""
    done = _cli(tmp_path, "dump", "apps.py:writer", "out", "-c", "job.dir=w")
    return len([ln for ln in done.stdout.splitlines() if ln.strip()])
