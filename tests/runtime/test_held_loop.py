"""A run whose event loop is held by a call that does not return still ends: a synchronous
function that sleeps an hour is named by the stall watch of a bounded run, which ends the
process; a stop past ``task.shutdown.ms`` or a second stop ends it with one line saying what
was abandoned; the threads of ``job.container.thread.pool.size`` never keep the process from
exiting. Real processes of ``samza-dsl run`` on the embedded local log."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")

HELD_APP = textwrap.dedent('''
    import os
    import threading
    import time

    from samza_dsl import KV, StreamApplication
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import LocalSystem

    SERDE = KVSerde(StringSerde(), JsonSerde())
    app = StreamApplication("held", config={"task.commit.ms": 100})
    local = LocalSystem("local")
    events = app.input(local.input("events", serde=SERDE, partitions=2))
    out = app.output(local.output("out", serde=SERDE, partitions=2))


    if os.environ.get("STRAY"):  # a thread of the application's that never ends
        threading.Thread(target=time.sleep, args=(3600,), name="stray-sleeper").start()


    def nap(kv):
        if kv.value["i"] == 5 and not os.environ.get("STRAY"):
            with open(os.environ["MARK"], "w") as f:
                f.write(kv.key)
            time.sleep(3600)
        return kv


    events.map(nap, name="nap").send_to(out)


    def sample_input(n):
        return [KV(f"e{i}", {"i": i}) for i in range(n)]
''')

#: what a test waits for a process that should end at most (it fails, never hangs)
LIMIT = 20


def _start(tmp_path: Path, *config: str, follow: bool = False,
           stray: bool = False) -> subprocess.Popen[str]:
    (tmp_path / "held_app.py").write_text(HELD_APP)
    args = [CLI, "run", "held_app.py:app", "--sample", "20", "-q"]
    for c in config:
        args += ["-c", c]
    if follow:
        args.append("--follow")
    env = {**os.environ, "MARK": str(tmp_path / "held.mark"), "STRAY": "1" if stray else ""}
    return subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _held(tmp_path: Path, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    """Until the function is in its sleep."""
    deadline = time.monotonic() + timeout
    while not (tmp_path / "held.mark").exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run exited first: {proc.communicate()}")
        assert time.monotonic() < deadline, "the function was never called"
        time.sleep(0.05)
    time.sleep(0.3)


def _end(proc: subprocess.Popen[str], since: float) -> tuple[float, str]:
    """Seconds from ``since`` to the process's exit, and its stderr; killed (with its session's
    other processes) if it does not end within ``LIMIT``."""
    try:
        _, err = proc.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its container processes too
        _, err = proc.communicate()
        raise AssertionError(f"the run did not end within {LIMIT} s:\n{err}") from None
    return time.monotonic() - since, err


NAMED = (r"nap\(\) at .*held_app\.py:\d+, operator 'held-1-map-nap', task 'Partition \d' "
         r"stream 'events' partition \d offset \d+")


@pytest.mark.parametrize("pool", [0, 2])
def test_a_bounded_run_held_by_a_function_that_never_returns_stops_at_the_stall_bound(
        tmp_path: Path, pool: int) -> None:
    proc = _start(tmp_path, "job.bounded.stall.ms=2000", f"job.container.thread.pool.size={pool}")
    _held(tmp_path, proc)
    took, err = _end(proc, time.monotonic())
    assert proc.returncode == 2, err
    assert took < 2 + 4, f"took {took:.1f} s:\n{err}"
    assert "Traceback" not in err, err
    last = err.rstrip().splitlines()[-1]
    assert last.startswith("samza-dsl run: error: the run stopped: it made no progress for "), err
    assert "(job.bounded.stall.ms=2000)" in last
    if pool:  # on a thread of the pool: the loop is free, and says what is in flight
        assert re.search(r"task 'Partition \d': 1 message in flight, the oldest at stream "
                         r"'events' partition \d offset \d+ for [\d.]+ s: operator "
                         r"'held-1-map-nap'", last), last
        assert re.search(r"thread 'samza-task_\d' of job.container.thread.pool.size is in "
                         r"nap\(\) at .*held_app\.py:\d+, operator 'held-1-map-nap'", last), last
    else:  # on the loop's thread: the watch names where it is held
        assert re.search(r"the event loop's thread was held for [\d.]+ s in " + NAMED, last), last
        warning = next(ln for ln in err.splitlines() if "the run has made no progress" in ln)
        assert re.search(NAMED, warning), warning


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_of_a_held_run_ends_it_past_the_shutdown_bound_naming_what_was_abandoned(
        tmp_path: Path, sig: int, code: int) -> None:
    proc = _start(tmp_path, "task.shutdown.ms=1500", follow=True)
    _held(tmp_path, proc)
    sent = time.monotonic()
    proc.send_signal(sig)
    took, err = _end(proc, sent)
    assert proc.returncode == code, err
    assert 1.5 <= took < 1.5 + 4, f"took {took:.1f} s:\n{err}"
    name = signal.Signals(sig).name
    line = err.rstrip().splitlines()[-1]
    assert line.startswith(f"samza-dsl run: interrupted: job 'held' stopped without waiting on "
                           f"the stop ({name}), task.shutdown.ms=1500 and 1 s later: the event "
                           f"loop's thread was held for "), err
    assert re.search(NAMED, line), line
    assert "the next run resumes after the last checkpoint" in line
    assert "Traceback" not in err, err


def _second_ctrl_c(tmp_path: Path, proc: subprocess.Popen[str]) -> tuple[float, str]:
    """Ctrl-C once the run is held, and again 1.5 s later (the run still going): how long it
    took to end after the second, and its stderr; its exit status is Ctrl-C's."""
    _held(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.5)
    assert proc.poll() is None, proc.communicate()
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    took, err = _end(proc, sent)
    assert proc.returncode == 130, err
    return took, err


@pytest.mark.parametrize("pool", [0, 2])
def test_a_second_ctrl_c_ends_a_held_run_at_once(tmp_path: Path, pool: int) -> None:
    proc = _start(tmp_path, "task.shutdown.ms=60000", f"job.container.thread.pool.size={pool}",
                  follow=True)
    took, err = _second_ctrl_c(tmp_path, proc)
    assert took < 4, f"took {took:.1f} s:\n{err}"
    assert "Traceback" not in err, err
    line = err.rstrip().splitlines()[-1]
    if pool:  # the loop is free: it stops without waiting, naming the message in flight
        assert line.startswith("samza-dsl run: interrupted: job 'held' was sent a second stop "
                               "(SIGINT), so it stopped without waiting: "), err
        assert re.search(r"task 'Partition \d': 1 message in flight, the oldest at stream "
                         r"'events' partition \d offset \d+ for [\d.]+ s: operator "
                         r"'held-1-map-nap'", line), line
    else:
        assert line.startswith("samza-dsl run: interrupted: job 'held' stopped without waiting "
                               "on a second stop (SIGINT, "), err
        assert re.search(NAMED, line), line


def test_a_second_stop_ends_a_held_run_of_several_containers_at_once(tmp_path: Path) -> None:
    """The signals go to the parent process alone: it passes the first stop on, then the
    second; the held container ends itself, naming what it abandons, and so does the run."""
    proc = _start(tmp_path, "task.shutdown.ms=60000", "job.container.count=2", follow=True)
    took, err = _second_ctrl_c(tmp_path, proc)
    assert took < 5, f"took {took:.1f} s:\n{err}"
    assert "Traceback" not in err, err
    held = next(ln for ln in err.splitlines() if "held-1-map-nap" in ln)
    assert re.match(r"job 'held' container \d stopped without waiting on a second stop \(SIGTERM, "
                    r"[\d.]+ s after SIGTERM\): the event loop's thread was held for [\d.]+ s in "
                    + NAMED, held), held
    assert re.match(r"samza-dsl run: interrupted: job 'held': container \d of 2 stopped without "
                    r"waiting on a second stop", err.rstrip().splitlines()[-1]), err


def test_the_same_stop_sent_twice_at_once_is_one_stop(tmp_path: Path) -> None:
    """``timeout`` sends its signal to the process and to its group: one stop, which waits
    ``task.shutdown.ms`` for the messages in flight as any first stop does."""
    proc = _start(tmp_path, "task.shutdown.ms=2000", follow=True)
    _held(tmp_path, proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    os.killpg(proc.pid, signal.SIGTERM)
    took, err = _end(proc, sent)
    assert proc.returncode == 143, err
    assert took >= 2.0, f"took {took:.1f} s:\n{err}"
    assert "on the stop (SIGTERM), task.shutdown.ms=2000" in err, err


def test_a_thread_that_never_ends_does_not_keep_a_finished_run_from_exiting(
        tmp_path: Path) -> None:
    proc = _start(tmp_path, stray=True)
    _, err = _end(proc, time.monotonic())
    assert proc.returncode == 0, err
    assert err.rstrip().splitlines()[-1] == (
        "samza-dsl: left 1 thread(s) behind that did not end within 2 s of the end: "
        "stray-sleeper"), err


def test_the_watch_ends_at_once_with_its_run() -> None:
    """A run's end does not wait for the watch's next look (up to a tick of 0.2 s): every
    bounded run, and every test that runs one, would pay it."""
    import asyncio
    import threading

    from runtime.host.watchdog import LoopWatch

    async def watched() -> float:
        watch = LoopWatch(asyncio.get_running_loop(), threading.get_ident(), stall_s=0.0,
                          grace_s=1.0, armed=lambda: True, describe=lambda _: "",
                          stop_now=lambda _: None, give_up=lambda *_: None, error_code=2,
                          who="job 'w'").start()
        await asyncio.sleep(0.05)  # the watch's thread waits in its tick
        started = time.perf_counter()
        watch.stop()
        return time.perf_counter() - started

    took = asyncio.run(watched())
    assert took < 0.05, f"the watch took {took * 1000:.0f} ms to end"
