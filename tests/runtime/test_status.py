"""``samza-dsl status`` on the embedded local system, through the real CLI: a job that never ran
is a clear error; after a run, every partition's checkpoint with lag 0 and its age, the window's
store with its bytes, the generation; lag after a ``load``; a checkpoint written before
checkpoints recorded their time shows its age as unknown; beside a following run of two
containers, both show running with their PIDs; and a status changes nothing in the job's log."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import msgspec

from runtime import LocalRunner
from runtime.local.log import LocalLog
from samza_dsl import KV
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde

SERDE = KVSerde(StringSerde(), JsonSerde())
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")

APP = textwrap.dedent('''
    from datetime import timedelta
    from samza_dsl import KV, StreamApplication, Windows
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import LocalSystem

    SERDE = KVSerde(StringSerde(), JsonSerde())
    app = StreamApplication("stat", config={"task.commit.ms": 100})
    local = LocalSystem("local")
    events = app.input(local.input("events", serde=SERDE, partitions=2))
    out = app.output(local.output("out", serde=SERDE, partitions=2))
    # event i at hour i: panes close during the run, so the store writes its watermark
    w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(days=1),
                               init=int, fold=lambda kv, n: n + 1,
                               event_time=lambda kv: kv.value["i"] * 3600.0)
    events.window(w, name="per-key").map(lambda p: KV(p.key.key, p.message),
                                         name="pane").send_to(out)
''')


def _module(tmp_path: Path) -> Any:
    (tmp_path / "stat_app.py").write_text(APP)
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib

        return importlib.reload(importlib.import_module("stat_app"))
    finally:
        sys.path.remove(str(tmp_path))


def _events(n: int, start: int = 0) -> list[KV[str, Any]]:
    return [KV(f"k{i % 7}", {"i": i}) for i in range(start, start + n)]


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args, "-c", f"job.dir={tmp_path / 'job'}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def _status(tmp_path: Path) -> dict[str, Any]:
    proc = _cli(tmp_path, "status", "stat_app.py:app", "--json")
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _log_digest(tmp_path: Path) -> str:
    return hashlib.sha256((tmp_path / "job" / "logs" / "local" / "data.mdb").read_bytes()
                          ).hexdigest()


def test_a_job_that_never_ran_is_a_clear_error(tmp_path: Path) -> None:
    _module(tmp_path)
    proc = _cli(tmp_path, "status", "stat_app.py:app")
    assert proc.returncode == 2
    assert "job 'stat-1' has not run here" in proc.stderr, proc.stderr
    assert "samza-dsl run stat_app.py:app" in proc.stderr, proc.stderr
    assert not (tmp_path / "job").exists()  # looking created nothing


def test_status_after_a_run_and_after_a_load(tmp_path: Path) -> None:
    module = _module(tmp_path)
    config = {"job.dir": str(tmp_path / "job")}
    started = time.time()
    runner = LocalRunner(module.app, config, inputs={"events": _events(40)})
    runner.run()
    runner.close()

    before = _log_digest(tmp_path)
    s = _status(tmp_path)
    assert _log_digest(tmp_path) == before  # status writes nothing into the log
    assert s["version"] == 1 and s["job"] == "stat-1" and s["system"] == "local"
    assert s["generation"] == 1 and s["elasticity_factor"] == 1
    assert s["containers"] == [{"id": 0, "state": "stopped", "pid": None}]
    assert s["locks"] == []
    rows = [r for r in s["partitions"] if r["stream"] == "events"]
    assert sorted((r["task"], r["partition"]) for r in rows) == [("Partition 0", 0),
                                                                   ("Partition 1", 1)]
    assert sum(r["end_offset"] for r in rows) == 40
    for r in rows:
        assert r["checkpointed_offset"] == r["end_offset"] - 1
        assert r["next_offset"] == r["end_offset"] and r["lag"] == 0
        assert started - 1 <= r["checkpoint_written"] <= time.time()
        assert 0 <= r["checkpoint_age_seconds"] < 120
    (store,) = s["stores"]
    assert store["exists"] and store["task_dirs"] == 2 and store["bytes"] > 0
    assert store["store"] == "stat-1-window-per-key"
    assert store["changelog"] == "stat-1-window-per-key-changelog"
    assert store["changelog_offsets"] > 0
    log = LocalLog(tmp_path / "job" / "logs" / "local")
    try:  # the span of the changelog's partitions, as the log gives it
        assert store["changelog_offsets"] == sum(
            log.end_offset(store["changelog"], p) - log.start_offset(store["changelog"], p)
            for p in range(2))
    finally:
        log.close()

    text = _cli(tmp_path, "status", "stat_app.py:app")
    assert text.returncode == 0, text.stderr
    assert "generation 1, elasticity factor 1" in text.stdout
    assert "container 0: stopped" in text.stdout
    assert "CHECKPOINT AGE" in text.stdout and "unknown" not in text.stdout, text.stdout

    # more input: the lag is what was loaded
    with open(tmp_path / "more.jsonl", "w") as f:
        for kv in _events(15, start=40):
            f.write(json.dumps({"key": kv.key, "value": kv.value}) + "\n")
    loaded = _cli(tmp_path, "load", "stat_app.py:app", "events", "more.jsonl")
    assert loaded.returncode == 0, loaded.stderr
    s = _status(tmp_path)
    rows = [r for r in s["partitions"] if r["stream"] == "events"]
    assert sum(r["lag"] for r in rows) == 15
    assert all(r["lag"] == r["end_offset"] - r["checkpointed_offset"] - 1 for r in rows)

    # a checkpoint written before checkpoints recorded their time: its age is unknown
    log = LocalLog(tmp_path / "job" / "logs" / "local")
    try:
        key = "checkpoint/stat-1/Partition 0"
        data = msgspec.msgpack.decode(log.get_meta(key))
        del data["written"]
        log.put_meta(key, msgspec.msgpack.encode(data))
    finally:
        log.close()
    s = _status(tmp_path)
    old = [r for r in s["partitions"] if r["task"] == "Partition 0"]
    assert old and all(r["checkpoint_age_seconds"] is None and r["checkpoint_written"] is None
                       and r["checkpointed_offset"] is not None for r in old)
    assert "unknown" in _cli(tmp_path, "status", "stat_app.py:app").stdout

    # the next run reads the old checkpoint and writes a new one, with its time
    runner = LocalRunner(module.app, config)
    runner.run()
    runner.close()
    s = _status(tmp_path)
    assert s["generation"] == 2
    assert all(r["lag"] == 0 and r["checkpoint_age_seconds"] is not None
               for r in s["partitions"])


def test_status_beside_a_following_run_of_two_containers(tmp_path: Path) -> None:
    module = _module(tmp_path)
    config = {"job.dir": str(tmp_path / "job"), "job.container.count": 2}
    runner = LocalRunner(module.app, config, inputs={"events": _events(100)}, follow=True)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        # "running" comes as the containers are forked: wait until both processes are there
        while time.monotonic() < deadline and not (
                runner.status()["state"] == "running"
                and all(c["pid"] and c["alive"]
                        for c in runner.status().get("containers", [{}]))):
            time.sleep(0.05)
        pids = [c["pid"] for c in runner.status()["containers"]]
        assert all(c["alive"] for c in runner.status()["containers"])
        # the containers take their locks as they start: wait until both show
        while True:
            s = _status(tmp_path)
            if [c["state"] for c in s["containers"]] == ["running", "running"] \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert s["containers"] == [{"id": i, "state": "running", "pid": pid}
                                   for i, pid in enumerate(pids)], s
        assert {"file": "job.lock", "pid": os.getpid(), "doing": "start 2 containers"} \
            in s["locks"]
        text = _cli(tmp_path, "status", "stat_app.py:app")
        assert f"container 0: running, pid {pids[0]}" in text.stdout, text.stdout
        assert f"container 1: running, pid {pids[1]}" in text.stdout, text.stdout
        # status took no lock: the job still runs
        assert runner.status()["state"] == "running"
    finally:
        runner.stop(timeout=60)
    assert runner.status()["state"] == "finished"
    s = _status(tmp_path)
    assert [(c["id"], c["state"]) for c in s["containers"]] == [(0, "stopped"), (1, "stopped")]
    assert s["locks"] == []
    assert sum(r["lag"] for r in s["partitions"] if r["stream"] == "events") == 0
