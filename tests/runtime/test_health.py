"""The health endpoint a supervisor probes (``job.health.port``): ``/healthz`` answers while the
container's loop runs and stops answering when the process is frozen; ``/ready`` says 200 only
once the tasks are restored and running. Real ``samza-dsl run`` processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runtime.health import HealthServer, health_address
from samza_dsl.config import validate_config
from samza_dsl.errors import ConfigError

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
    assert health_address({}) is None
    assert health_address({"job.health.port": 9000}, 2) == ("127.0.0.1", 9002)


def test_ready_is_503_until_the_tasks_run_and_only_get_is_answered() -> None:
    state = ["restoring", False, 3]
    server = HealthServer(lambda: (str(state[0]), bool(state[1]), int(state[2])))
    assert server.answer("GET", "/healthz") == (200, {"state": "restoring", "ready": False,
                                                      "tasks": 3})
    assert server.answer("GET", "/ready")[0] == 503
    state[:2] = ["running", True]
    assert server.answer("GET", "/ready?verbose=1")[0] == 200
    assert server.answer("POST", "/ready")[0] == 405
