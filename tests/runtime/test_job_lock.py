"""One process per container: a second `samza-dsl run` of a running job (or of a running
container of it) is refused naming the holder's PID, `reset` refuses while the job runs, `load`
and `dump` do not, and containers of one job still run side by side. Real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime import LocalRunner
from runtime.host.job_lock import JobLockedError
from runtime.local.log import LocalLog
from runtime.local.system import LocalJob

ROOT = Path(__file__).resolve().parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
COUNTER = f"{ROOT / 'examples' / 'readwrite_counter.py'}:app"
JOB = "readwrite-counter-1"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def events(path: Path, start: int, n: int) -> Path:
    path.write_text("".join(json.dumps({"key": str(i), "value": {"id": i}}) + "\n"
                            for i in range(start, start + n)))
    return path


def follow(cwd: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([CLI, "run", COUNTER, "--follow", "-q", "-c", "task.commit.ms=100",
                             *extra], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for_lock(proc: subprocess.Popen[str], path: Path) -> None:
    """Until ``proc`` has written its PID into the lock file it holds."""
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text().startswith(f"{proc.pid} ")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the job did not take its lock"
        time.sleep(0.05)


def counts_end(cwd: Path) -> int:
    with LocalLog(cwd / ".samza" / JOB / "logs" / "local") as log:
        return sum(log.end_offset("counts", p) for p in range(4))


def stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_second_run_of_a_running_job_is_refused_naming_the_first(tmp_path: Path) -> None:
    assert cli("load", COUNTER, "events", str(events(tmp_path / "a.jsonl", 0, 300)),
               cwd=tmp_path).returncode == 0
    first = follow(tmp_path)
    try:
        wait_for_lock(first, tmp_path / ".samza" / JOB / "locks" / "job.lock")
        second = cli("run", COUNTER, "-q", cwd=tmp_path)
        assert second.returncode == 2, second.stdout + second.stderr
        assert "Traceback" not in second.stderr
        assert f"process {first.pid}" in second.stderr, second.stderr
        assert "job.lock" in second.stderr and "stop that process first" in second.stderr
        # the second process did nothing: every event is counted once, by the first
        deadline = time.monotonic() + 60
        while counts_end(tmp_path) < 300:
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        assert counts_end(tmp_path) == 300
    finally:
        stop(first)
    assert first.returncode == 0
    # once the first has stopped, a run goes ahead
    again = cli("run", COUNTER, "-q", cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_reset_refuses_while_the_job_runs_load_and_dump_do_not(tmp_path: Path) -> None:
    assert cli("load", COUNTER, "events", str(events(tmp_path / "a.jsonl", 0, 100)),
               cwd=tmp_path).returncode == 0
    job = follow(tmp_path)
    try:
        wait_for_lock(job, tmp_path / ".samza" / JOB / "locks" / "job.lock")
        reset = cli("reset", COUNTER, "--outputs", cwd=tmp_path)
        assert reset.returncode == 2
        assert f"cannot reset job '{JOB}'" in reset.stderr and f"process {job.pid}" in reset.stderr
        assert (tmp_path / ".samza" / JOB / "stores").is_dir()  # nothing was removed
        load = cli("load", COUNTER, "events", str(events(tmp_path / "b.jsonl", 100, 50)),
                   cwd=tmp_path)
        assert load.returncode == 0, load.stderr
        deadline = time.monotonic() + 60
        while counts_end(tmp_path) < 150:  # the running job takes the loaded events
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        dump = cli("dump", COUNTER, "events", cwd=tmp_path)
        assert dump.returncode == 0 and len(dump.stdout.splitlines()) == 150
    finally:
        stop(job)
    assert job.returncode == 0
    reset = cli("reset", COUNTER, cwd=tmp_path)
    assert reset.returncode == 0, reset.stderr
    assert not (tmp_path / ".samza" / JOB / "stores").exists()


def test_a_crashed_holder_leaves_no_lock_behind(tmp_path: Path) -> None:
    assert cli("load", COUNTER, "events", str(events(tmp_path / "a.jsonl", 0, 50)),
               cwd=tmp_path).returncode == 0
    job = follow(tmp_path)
    try:
        wait_for_lock(job, tmp_path / ".samza" / JOB / "locks" / "job.lock")
    finally:
        job.kill()
        job.communicate(timeout=60)
    run = cli("run", COUNTER, "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stderr


MULTI = '''
from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

app = StreamApplication("multi", config={"task.commit.ms": 100})
local = LocalSystem("local")
serde = KVSerde(StringSerde(), JsonSerde())
app.input(local.input("events", serde=serde, partitions=4)).send_to(
    app.output(local.output("out", serde=serde, partitions=4)))
'''


def test_containers_run_side_by_side_but_one_process_per_container(tmp_path: Path) -> None:
    (tmp_path / "multi.py").write_text(MULTI)
    app = f"{tmp_path / 'multi.py'}:app"
    job_dir = tmp_path / "job"
    common = ["-q", "--follow", "--containers", "2", "-c", f"job.dir={job_dir}"]
    procs = [subprocess.Popen([CLI, "run", app, *common, "--container-id", str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    try:
        for i, p in enumerate(procs):  # both hold their container's lock at once
            wait_for_lock(p, job_dir / "locks" / f"container-{i}.lock")
        dup = subprocess.run([CLI, "run", app, *common, "--container-id", "0"],
                             capture_output=True, text=True, timeout=120)
        assert dup.returncode == 2, dup.stderr
        assert f"process {procs[0].pid} (`run container 0 of 2`" in dup.stderr, dup.stderr
        whole = subprocess.run([CLI, "run", app, "-q", "-c", f"job.dir={job_dir}"],
                               capture_output=True, text=True, timeout=120)
        assert whole.returncode == 2, whole.stderr
        assert f"process {procs[0].pid}" in whole.stderr
        assert f"process {procs[1].pid}" in whole.stderr
        reset = subprocess.run([CLI, "reset", app, "-c", f"job.dir={job_dir}"],
                               capture_output=True, text=True, timeout=120)
        assert reset.returncode == 2 and "cannot reset" in reset.stderr
        # a container of another count would share tasks with these: refused too
        other = subprocess.run([CLI, "run", app, "-q", "--containers", "3", "--container-id",
                                "2", "-c", f"job.dir={job_dir}"],
                               capture_output=True, text=True, timeout=120)
        assert other.returncode == 2, other.stderr
        assert "another job.container.count" in other.stderr
        assert f"process {procs[1].pid} (`run container 1 of 2`" in other.stderr
    finally:
        for p in procs:
            stop(p)
    assert [p.returncode for p in procs] == [0, 0]


def test_a_finished_run_releases_the_job_and_a_running_one_refuses_reset(tmp_path: Path
                                                                         ) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from readwrite_counter import app
    finally:
        sys.path.remove(str(ROOT / "examples"))
    from samza_dsl import KV

    config = {"job.dir": str(tmp_path / "job")}
    inputs = {"events": [KV(str(i), {"id": i}) for i in range(20)]}
    first = LocalRunner(app, config, inputs=inputs).run()  # not closed: its outputs stay
    second = LocalRunner(app, config).run()  # readable, but the job is free once run
    assert len(first.messages("counts")) == 20 and second.messages("counts") == []
    running = LocalRunner(app, {**config, "job.container.count": 2}, follow=True).start()
    try:
        deadline = time.monotonic() + 60
        while running.status()["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        job = LocalJob(app, config, run=False)
        try:
            with pytest.raises(JobLockedError, match=f"process {os.getpid()}"):
                job.reset()
        finally:
            job.close()
    finally:
        running.stop(timeout=60)
        first.close()
        second.close()
    job = LocalJob(app, config, run=False)
    try:
        assert job.reset()
    finally:
        job.close()


def test_a_run_with_another_job_dir_on_the_same_log_is_refused_naming_the_first(
        tmp_path: Path) -> None:
    log = tmp_path / "shared-log"
    on_log = ["-c", f"systems.local.path={log}"]
    assert cli("load", COUNTER, "events", str(events(tmp_path / "a.jsonl", 0, 300)), *on_log,
               "-c", f"job.dir={tmp_path / 'j1'}", cwd=tmp_path).returncode == 0
    first = follow(tmp_path, *on_log, "-c", f"job.dir={tmp_path / 'j1'}")
    try:
        wait_for_lock(first, log / "locks" / JOB / "job.lock")
        for argv in (["-q"], ["-q", "--containers", "2"]):
            second = cli("run", COUNTER, *argv, *on_log, "-c", f"job.dir={tmp_path / 'j2'}",
                         cwd=tmp_path)
            assert second.returncode == 2, second.stdout + second.stderr
            assert "Traceback" not in second.stderr and len(second.stderr.splitlines()) == 1
            for fragment in (f"process {first.pid}", f"host {socket.gethostname()}",
                             f"job.dir {tmp_path / 'j1'}", str(log), "stop that process first"):
                assert fragment in second.stderr, second.stderr
        reset = cli("reset", COUNTER, *on_log, "-c", f"job.dir={tmp_path / 'j2'}", cwd=tmp_path)
        assert reset.returncode == 2 and f"process {first.pid}" in reset.stderr, reset.stderr
        deadline = time.monotonic() + 60
        with LocalLog(log) as lg:
            while sum(lg.end_offset("counts", p) for p in range(4)) < 300:
                assert first.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(0.3)
            # every event counted once: the refused runs processed nothing
            assert sum(lg.end_offset("counts", p) for p in range(4)) == 300
    finally:
        stop(first)
    assert first.returncode == 0
    # another job on the same log has its own locks: it runs while this one would be refused
    again = cli("run", COUNTER, "-q", *on_log, "-c", f"job.dir={tmp_path / 'j2'}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_the_containers_of_one_run_share_the_log(tmp_path: Path) -> None:
    log = tmp_path / "shared-log"
    on_log = ["-c", f"systems.local.path={log}", "-c", f"job.dir={tmp_path / 'j1'}"]
    assert cli("load", COUNTER, "events", str(events(tmp_path / "a.jsonl", 0, 300)), *on_log,
               cwd=tmp_path).returncode == 0
    run = cli("run", COUNTER, "-q", "--containers", "2", *on_log, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    with LocalLog(log) as lg:
        assert sum(lg.end_offset("counts", p) for p in range(4)) == 300
