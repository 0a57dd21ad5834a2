"""Jobs of several containers on the embedded local system: LocalRunner starts N processes,
`samza-dsl run --container-id i` runs one, tasks are split deterministically, and a failing
container stops the run with an error naming it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runtime import LocalRunner
from runtime.local.system import LocalJob
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import ConfigError, SamzaError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem

SERDE = KVSerde(StringSerde(), JsonSerde())
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")

APP = textwrap.dedent('''
    import os
    from samza_dsl import KV, StreamApplication
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import LocalSystem

    SERDE = KVSerde(StringSerde(), JsonSerde())


    def regroup(kv):
        if kv.value["i"] == int(os.environ.get("FAIL_AT", "-1")):
            raise ValueError("bad event")
        return KV(str(kv.value["i"] % 5), [os.getpid(), kv.value["i"]])


    app = StreamApplication("multi", config={"task.commit.ms": 100})
    local = LocalSystem("local")
    events = app.input(local.input("events", serde=SERDE, partitions=4))
    out = app.output(local.output("out", serde=SERDE, partitions=3))
    events.partition_by(lambda kv: kv.value["i"] % 7, lambda kv: kv.value,
                        name="by-group").map(regroup, name="regroup").send_to(out)
''')


def _app_module(tmp_path: Path) -> Any:
    path = tmp_path / "multi_app.py"
    path.write_text(APP)
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib

        module = importlib.import_module("multi_app")
        return importlib.reload(module)
    finally:
        sys.path.remove(str(tmp_path))


def _events(n: int) -> list[KV[str, Any]]:
    return [KV(f"e{i}", {"i": i}) for i in range(n)]


def test_local_runner_starts_one_process_per_container(tmp_path: Path) -> None:
    module = _app_module(tmp_path)
    config = {"job.dir": str(tmp_path / "job"), "job.container.count": 2}
    runner = LocalRunner(module.app, config, inputs={"events": _events(2000)}).run()
    out = runner.messages("out")
    assert sorted(m.value[1] for m in out) == list(range(2000))
    pids = Counter(m.value[0] for m in out)
    assert len(pids) == 2 and os.getpid() not in pids  # two container processes did the work
    assert runner.status()["state"] == "finished"
    # every task of both stages checkpointed, in the log the containers shared
    job = LocalJob(module.app, {"job.dir": str(tmp_path / "job")}, run=False)
    try:
        assert set(job.checkpoints.tasks()) == {f"Partition {p}" for p in range(4)}
    finally:
        job.close()
    again = LocalRunner(module.app, config).run()
    assert again.messages("out") == []  # each container resumed after its checkpoints


def test_a_failing_container_stops_the_run_with_an_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _app_module(tmp_path)
    monkeypatch.setenv("FAIL_AT", "700")
    config = {"job.dir": str(tmp_path / "job"), "job.container.count": 2}
    with pytest.raises(SamzaError, match=r"container \d \(exit code 1\) of 2 failed"):
        LocalRunner(module.app, config, inputs={"events": _events(2000)}).run()
    monkeypatch.setenv("FAIL_AT", "-1")
    rerun = LocalRunner(module.app, config).run()  # fixed: the run resumes and completes
    done = {m.value[1] for m in rerun.messages("out")}
    assert 700 in done


def test_each_container_run_on_its_own_with_container_id(tmp_path: Path) -> None:
    module = _app_module(tmp_path)
    job_dir = str(tmp_path / "job")
    job = LocalJob(module.app, {"job.dir": job_dir}, run=False)
    job.load("events", _events(1000))
    job.close()
    app_ref = f"{tmp_path / 'multi_app.py'}:app"
    procs = [subprocess.Popen([CLI, "run", app_ref, "-q", "--containers", "2",
                               "--container-id", str(i), "-c", f"job.dir={job_dir}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    job = LocalJob(module.app, {"job.dir": job_dir}, run=False)
    try:
        got = job.messages("out", since_start=False)
        assert sorted(m.value[1] for m in got) == list(range(1000))
        assert len({m.value[0] for m in got}) == 2
    finally:
        job.close()


def test_container_settings_are_checked(tmp_path: Path) -> None:
    app = StreamApplication("mem", config={"job.container.count": 2})
    mem = MemorySystem()
    app.input(mem.input("in", serde=SERDE)).sink(lambda m: None, name="s")
    with pytest.raises(SamzaError, match="Kafka or the local system"):
        LocalRunner(app, inputs={"in": [KV("a", 1)]}).run()
    local = StreamApplication("loc", config={"job.container.count": 2,
                                             "job.container.id": 2})
    local.input(LocalSystem("local").input("in", serde=SERDE, partitions=1)).sink(
        lambda m: None, name="s")
    with pytest.raises(ConfigError, match="job.container.id=2 is not below"):
        LocalRunner(local, {"job.dir": str(tmp_path / "job")}).run()


def test_stopping_a_following_job_of_two_containers_drains_and_commits(tmp_path: Path) -> None:
    module = _app_module(tmp_path)
    config = {"job.dir": str(tmp_path / "job"), "job.container.count": 2}
    runner = LocalRunner(module.app, config, inputs={"events": _events(500)}, follow=True)
    runner.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and runner.status()["state"] != "running":
        time.sleep(0.01)
    while time.monotonic() < deadline and len(runner.messages("out")) < 500:
        time.sleep(0.1)
    assert runner.status()["state"] == "running"
    assert all(c["alive"] for c in runner.status()["containers"])
    runner.stop(timeout=60)
    assert runner.status()["state"] == "finished"
    assert sorted(m.value[1] for m in runner.messages("out")) == list(range(500))
    again = LocalRunner(module.app, config).run()
    assert again.messages("out") == []


def test_a_stop_right_after_start_is_a_clean_stop_of_every_container(tmp_path: Path) -> None:
    """SIGTERM reaches a container before its loop runs: it is held until the container can
    handle it, then the container drains and commits (no container killed by the signal)."""
    module = _app_module(tmp_path)
    config = {"job.dir": str(tmp_path / "job"), "job.container.count": 2}
    for i in range(3):
        inputs = {"events": _events(50)} if i == 0 else None
        runner = LocalRunner(module.app, config, inputs=inputs, follow=True)
        runner.start()
        runner.stop(timeout=60)  # SIGTERM goes to each container as soon as it is forked
        assert runner.status()["state"] == "finished"
        assert [c["exit_code"] for c in runner.status()["containers"]] == [0, 0]


def test_samza_dsl_run_with_two_containers(tmp_path: Path) -> None:
    _app_module(tmp_path)
    app_ref = f"{tmp_path / 'multi_app.py'}:app"
    data = tmp_path / "events.jsonl"
    data.write_text("".join(f'{{"key": "e{i}", "value": {{"i": {i}}}}}\n' for i in range(300)))
    proc = subprocess.run([CLI, "run", app_ref, "-q", "--containers", "2", "--input",
                           f"events={data}", "-c", f"job.dir={tmp_path / 'job'}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "out: 300 message(s)" in proc.stdout


COUNTER = str(Path(__file__).resolve().parents[2] / "examples" / "readwrite_counter.py") + ":app"


def _ctrl_c_at(cwd: Path, moment: str) -> tuple[int, str, str]:
    """``run --containers 2 --follow`` stopped as a terminal's Ctrl-C stops it: SIGINT to its
    whole process group (the parent and both containers at once), once ``moment`` shows on
    standard error: the containers' first progress rows, their first processed messages, or both
    waiting for new input."""
    import re
    import signal
    import threading

    proc = subprocess.Popen([CLI, "run", COUNTER, "--containers", "2", "--follow", "--sample",
                             "20000", "--show", "0", "-c", "task.progress.ms=50"],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: list[str] = []
    seen = threading.Event()
    processed = re.compile(r"^container \d of 2: processed\s+([\d,]+)")
    waiting: set[str] = set()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            m = processed.match(line)
            began = m is not None and int(m.group(1).replace(",", "")) > 0
            if (moment == "started" and line.startswith("container ")) \
                    or (moment == "processing" and began):
                seen.set()
            elif moment == "waiting" and "waiting for new input" in line:
                waiting.add(line[:11])
                if len(waiting) == 2:
                    seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(90), f"no {moment!r} line:\n{''.join(lines)}"
        os.killpg(proc.pid, signal.SIGINT)
        out = proc.stdout.read() if proc.stdout is not None else ""
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(10)
    return proc.returncode, out, "".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["started", "processing", "waiting"])
def test_ctrl_c_on_a_following_run_of_two_containers_is_a_clean_stop(
        tmp_path: Path, moment: str) -> None:
    for i in range(5):
        cwd = tmp_path / str(i)
        cwd.mkdir()
        code, out, err = _ctrl_c_at(cwd, moment)
        assert code == 0, f"run {i}, Ctrl-C when {moment}: exit {code}\n{err[-3000:]}"
        assert "failed" not in err and "Traceback" not in err, err[-3000:]
        # no container was ended by the signal itself: each took it as a stop, drained, committed
        assert "stopped by" not in err, err[-3000:]
        assert "counts: " in out and "in: " in out, out
        # what was committed is not processed again: the next run reads only what is left
        again = subprocess.run([CLI, "run", COUNTER, "-q", "--show", "0"], cwd=cwd,
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        first = int(out.split("in: ")[1].split()[0].replace(",", ""))
        second = int(again.stdout.split("in: ")[1].split()[0].replace(",", ""))
        assert first + second == 20000, (out, again.stdout)
