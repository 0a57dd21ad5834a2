"""Jobs of several containers on the embedded local system: LocalRunner starts N processes,
`samza-dsl run --container-id i` runs one, tasks are split deterministically, and a failing
container stops the run with an error naming it."""

from __future__ import annotations

import contextlib
import os
import shutil
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
from samza_dsl.errors import ConfigError, Interrupted, SamzaError
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


@pytest.mark.parametrize("lock", ["log registry", "log transaction", "held locks"])
def test_containers_start_while_another_thread_holds_a_process_lock(tmp_path: Path,
                                                                    lock: str) -> None:
    """Containers are forked while another thread of the parent is inside the local log's
    registry or one of its transactions, or the job lock's bookkeeping (say, reading the
    outputs): a container must not inherit that lock taken, with no thread left to release it,
    and hang, nor a transaction of the parent's open."""
    import threading

    from runtime.host import job_lock
    from runtime.local import log_env

    module = _app_module(tmp_path)
    config = {"job.dir": str(tmp_path / "job"), "job.container.count": 2}
    held = {"log registry": log_env._REGISTRY_LOCK, "log transaction": log_env._TXN_GUARD,
            "held locks": job_lock._HELD_LOCK}[lock]
    done = threading.Event()

    def busy() -> None:  # holds the lock nearly all the time, as a busy reader would
        while not done.is_set():
            with held:
                time.sleep(0.005)
            time.sleep(0.0001)

    holder = threading.Thread(target=busy, daemon=True)
    holder.start()
    try:
        for _ in range(3):
            runner = LocalRunner(module.app, config, inputs={"events": _events(200)})
            runner.start()
            finished = runner.wait(timeout=60)
            if not finished:
                with contextlib.suppress(SamzaError):
                    runner.stop(timeout=1)
            assert finished, "a container hung on a lock it inherited taken"
            assert sorted(m.value[1] for m in runner.messages("out")) == list(range(200))
            runner.close()
            shutil.rmtree(tmp_path / "job")
    finally:
        done.set()
        holder.join()


def _stuck_run(tmp_path: Path, stuck_at: int, config: dict[str, Any] | None = None
               ) -> LocalRunner:
    """A following run of two containers, started, whose container 0 is blocked (for two
    minutes, in a user function, with no signal handler running) at message ``stuck_at``."""
    app = StreamApplication("stuck", config={"task.commit.ms": 100})
    local = LocalSystem("local")
    out = app.output(local.output("out", serde=SERDE, partitions=1))

    def stuck(kv: KV[str, Any]) -> KV[str, Any]:
        if kv.value["i"] == stuck_at:
            time.sleep(120)
        return kv

    app.input(local.input("events", serde=SERDE, partitions=2)).map(stuck, name="stuck") \
        .send_to(out)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job"), "job.container.count": 2,
                               **(config or {})},
                         inputs={"events": {0: _events(stuck_at + 3), 1: _events(0)}},
                         follow=True)
    runner.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and runner.status()["state"] != "running":
        time.sleep(0.01)
    time.sleep(1.5)  # the container is inside the blocking call by now
    return runner


def test_a_container_that_does_not_stop_in_task_shutdown_ms_ends_itself_and_is_named(
        tmp_path: Path) -> None:
    """A function that blocks the loop keeps a container from its clean stop: after
    task.shutdown.ms its watch (a thread of its own) ends it, the stop says so, and no process
    outlives the run (the other container, free, stops cleanly within it). The parent kills a
    container that does not end even so, a little later."""
    runner = _stuck_run(tmp_path, stuck_at=3, config={"task.shutdown.ms": 3000})
    began = time.monotonic()
    with pytest.raises(Interrupted, match=r"container 0 of 2 did not stop within "
                                          r"task.shutdown.ms=3000 of the stop"):
        runner.stop(timeout=60)
    assert time.monotonic() - began < 30
    assert all(not c["alive"] for c in runner.status()["containers"])


def test_stop_that_runs_out_of_time_leaves_no_container_process(tmp_path: Path) -> None:
    """stop(timeout) shorter than task.shutdown.ms: the containers are killed when it runs
    out, so that no process outlives the call (nor keeps the interpreter from exiting)."""
    runner = _stuck_run(tmp_path, stuck_at=1)
    with pytest.raises(SamzaError, match="did not stop within 2s, so its container processes "
                                         "were killed"):
        runner.stop(timeout=2)
    assert all(not c["alive"] for c in runner.status()["containers"])


def test_a_program_that_exits_without_stopping_its_containers_stops_them(tmp_path: Path) -> None:
    """A program that starts a following run of two containers and ends without stop(): at
    exit the run is stopped cleanly, so the program ends and leaves no process behind."""
    script = tmp_path / "leave.py"
    script.write_text(textwrap.dedent('''
        import sys, time
        from samza_dsl import KV, StreamApplication
        from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
        from samza_dsl.systems import LocalSystem
        from runtime import LocalRunner

        SERDE = KVSerde(StringSerde(), JsonSerde())
        app = StreamApplication("left", config={"task.commit.ms": 100})
        local = LocalSystem("local")
        out = app.output(local.output("out", serde=SERDE, partitions=1))
        app.input(local.input("events", serde=SERDE, partitions=2)).send_to(out)
        runner = LocalRunner(app, {"job.dir": sys.argv[1], "job.container.count": 2},
                             inputs={"events": [KV("a", {"i": 1})]}, follow=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                runner.status()["state"] == "running"
                and all(c["pid"] for c in runner.status().get("containers", [{}]))):
            time.sleep(0.01)
        print(*(c["pid"] for c in runner.status()["containers"]), flush=True)
    '''))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "job")], timeout=90,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split()[2] == "Z"  # gone, or a zombie
