"""The health endpoint a supervisor probes (``job.health.port``): ``/healthz`` answers within
100 ms while the container's loop works through a backlog of slow messages, answers 503 once a
function blocks the loop past ``job.health.liveness.ms``, and does not answer when the process
is frozen; ``/ready`` says 200 only once the tasks are restored and running. Real
``samza-dsl run`` processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runtime.host.health import HealthServer, health_address
from samza_dsl.config import validate_config
from samza_dsl.errors import ConfigError
from samza_dsl.jobconfig import JobConfig

ROOT = Path(__file__).resolve().parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
COUNTER = f"{ROOT / 'examples' / 'readwrite_counter.py'}:app"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str, timeout: float = 2.0) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _until(check: object, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()  # type: ignore[operator]
        except OSError:
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_running_container_is_live_and_ready_and_a_frozen_one_does_not_answer(
        tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"key": f"k{i % 7}", "value": i}) + "\n" for i in range(50)))
    load = subprocess.run([CLI, "load", COUNTER, "events", "in.jsonl"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert load.returncode == 0, load.stderr
    port = _free_port()
    proc = subprocess.Popen([CLI, "run", COUNTER, "--follow", "-q", "-c",
                             f"job.health.port={port}"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _until(lambda: _get(port, "/ready")[0] == 200, 60)
        status, body = _get(port, "/healthz")
        assert status == 200 and body["state"] == "running" and body["ready"] is True, body
        assert body["tasks"] == 4, body
        assert _get(port, "/nope")[0] == 404
        proc.send_signal(signal.SIGSTOP)  # a frozen host: its loop answers no probe
        _until(lambda: _stopped(proc.pid), 10)  # the signal is taken by then, every thread
        try:
            with pytest.raises(OSError):  # the probe times out
                _get(port, "/healthz", timeout=1.5)
        finally:
            proc.send_signal(signal.SIGCONT)
        assert _until(lambda: _get(port, "/healthz")[0] == 200, 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    with pytest.raises(OSError):  # closed with the container
        _get(port, "/healthz", timeout=1.0)


def test_a_health_port_in_use_is_one_line_and_a_bad_value_a_config_error(
        tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "in.jsonl").write_text(json.dumps({"key": "a", "value": 1}) + "\n")
        proc = subprocess.run([CLI, "run", COUNTER, "--input", "events=in.jsonl", "-q", "-c",
                               f"job.health.port={port}"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]  # after the --input's "loaded 1 message(s)"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"job.health.port: cannot listen on 127.0.0.1:{port}" in line, line
    with pytest.raises(ConfigError, match="job.health.port"):
        validate_config({"job.health.port": -5})
    assert health_address(JobConfig.validated({})) is None
    assert health_address(JobConfig.validated({"job.health.port": 9000}), 2) == ("127.0.0.1", 9002)


def test_ready_is_503_until_the_tasks_run_and_only_get_is_answered() -> None:
    state = ["restoring", False, 3]
    server = HealthServer(lambda: (str(state[0]), bool(state[1]), int(state[2])))
    status, body = server.answer("GET", "/healthz")
    assert status == 200 and body["state"] == "restoring" and body["ready"] is False, body
    assert body["tasks"] == 3, body
    assert server.answer("GET", "/ready")[0] == 503
    state[:2] = ["running", True]
    assert server.answer("GET", "/ready?verbose=1")[0] == 200
    assert server.answer("POST", "/ready")[0] == 405


# --- liveness measures the loop's progress, from a thread of its own ----------------------------

_SLOW_APP = """
import pathlib
import time

from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

BLOCK_AT = {block_at}
DONE = [0]


def work(kv):
    if getattr(kv.value, "value", kv.value) == BLOCK_AT:  # after partition_by: KV(key, KV)
        time.sleep(3600)  # blocks the loop for good
    end = time.perf_counter() + {seconds}
    while time.perf_counter() < end:  # the CPU busy with the job's function, the GIL held
        pass
    DONE[0] += 1
    if DONE[0] == {n}:
        pathlib.Path("all-done").touch()
    return kv


app = StreamApplication("busy-{tag}", config={{"task.commit.ms": 1000}})
local = LocalSystem("local")
serde = KVSerde(StringSerde(), JsonSerde())
events = app.input(local.input("events", serde=serde, partitions=4))
(events.partition_by(lambda kv: kv.key, name="by-key")  # the slow stage reads an intermediate
    .map(work, name="work")
    .send_to(app.output(local.output("done", serde=serde, partitions=4))))
"""


def _slow_job(tmp_path: Path, tag: str, n: int, seconds: float, block_at: int,
              *config: str) -> tuple[subprocess.Popen[str], int]:
    (tmp_path / "app.py").write_text(textwrap.dedent(_SLOW_APP.format(
        block_at=block_at, seconds=seconds, tag=tag, n=n)))
    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"key": f"k{i}", "value": i}) + "\n" for i in range(n)))
    load = subprocess.run([CLI, "load", "app.py:app", "events", "in.jsonl"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert load.returncode == 0, load.stderr
    port = _free_port()
    args = [a for c in config for a in ("-c", c)]
    proc = subprocess.Popen([CLI, "run", "app.py:app", "--follow", "-q", "-c",
                             f"job.health.port={port}", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, port


def _timed(port: int, path: str) -> tuple[float, int, dict[str, object]]:
    t = time.monotonic()
    status, body = _get(port, path, timeout=5.0)
    return time.monotonic() - t, status, body


def test_healthz_answers_within_100_ms_while_the_loop_works_through_slow_messages(
        tmp_path: Path) -> None:
    # 16000 messages at 1.25 ms each: 20 s of work for the loop, which the probes fall into
    proc, port = _slow_job(tmp_path, "slow", 16_000, 0.00125, -1)
    try:
        _until(lambda: _get(port, "/ready")[0] == 200, 30)
        time.sleep(1.0)  # the tasks are well into their backlog
        took = []
        for _ in range(20):
            secs, status, body = _timed(port, "/healthz")
            assert status == 200 and body["state"] == "running", body
            took.append(secs)
            time.sleep(0.1)
        assert not (tmp_path / "all-done").exists(), "the backlog was done before the probes"
        took.sort()
        assert took[len(took) // 2] < 0.1 and took[-2] < 0.25, took  # slowest: a busy machine
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)


def test_healthz_fails_after_the_threshold_when_a_function_blocks_the_loop_for_good(
        tmp_path: Path) -> None:
    proc, port = _slow_job(tmp_path, "stuck", 200, 0.0, 50, "job.health.liveness.ms=2000")
    try:
        _until(lambda: _get(port, "/healthz")[0] == 503, 40)
        secs, status, body = _timed(port, "/healthz")
        assert status == 503 and secs < 0.5, (secs, body)
        assert float(body["progress_s"]) > 2.0, body  # type: ignore[arg-type]
        assert "job.health.liveness.ms=2000" in str(body["error"]), body
        assert _get(port, "/ready")[0] == 200  # ready is about tasks, live about the loop
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T in /proc), all its threads with it."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"
