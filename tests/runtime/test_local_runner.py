"""``LocalRunner``: ``run()`` until the bounded inputs end (or SIGINT/SIGTERM), ``start()`` /
``stop()`` / ``status()`` / ``wait()`` for embedding, failures, and progress output."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from runtime import LocalRunner
from runtime.engine.job import SSP
from samza_dsl import StreamApplication
from samza_dsl.errors import ConfigError, SamzaError, TaskError
from samza_dsl.systems import MemorySystem

N = 3000  # messages in a "long" job: ~1 ms each


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    """``run()`` has no timeout: a job that never stops must fail its test, not stall the suite."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError("the LocalRunner test did not finish within 30 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(30)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def long_app(per_message_s: float = 0.001, **config: Any) -> StreamApplication:
    mem = MemorySystem()
    app = StreamApplication("long", config=config or None)

    async def slow(m: int) -> list[int]:
        await asyncio.sleep(per_message_s)
        return [m]

    app.input(mem.input("in", partitions=1)).async_flat_map(slow, name="slow").send_to(
        app.output(mem.output("out")))
    return app


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def committed(runner: LocalRunner) -> int:
    return runner.checkpoints.checkpoints.get("Partition 0", {}).get(SSP("in", 0), -1)


def test_the_documented_import_gives_the_local_runner() -> None:
    import runtime.runner

    assert LocalRunner is runtime.runner.LocalRunner  # API.md: "from runtime import LocalRunner"


def test_run_processes_bounded_inputs_and_commits() -> None:
    mem = MemorySystem()
    app = StreamApplication("words")
    words = mem.input("words", partitions=2)
    app.input(words).map(lambda w: len(w), name="len").send_to(app.output(mem.output("lengths")))
    runner = LocalRunner(app, inputs={"words": {0: ["a", "bb"], 1: ["ccc"]}}).run()
    assert sorted(runner.messages("lengths")) == [1, 2, 3]
    status = runner.status()
    assert status["state"] == "finished" and status["done"] is True
    assert status["checkpoints"] == {"Partition 0": {"words[0]": 1}, "Partition 1": {"words[1]": 0}}
    with pytest.raises(KeyError):
        runner.messages("nope")


def test_start_status_stop_commits_exactly_what_was_processed() -> None:
    runner = LocalRunner(long_app(), inputs={"in": list(range(N))})
    assert runner.status()["state"] == "starting"
    with pytest.raises(SamzaError):
        runner.stop()
    runner.start()
    with pytest.raises(SamzaError):
        runner.start()
    wait_until(lambda: runner.status()["processed"] > 20)
    status = runner.status()
    assert status["state"] == "running"
    assert status["done"] is False
    started = time.monotonic()
    runner.stop(timeout=5.0)
    assert time.monotonic() - started < 2.0
    status = runner.status()
    assert status["state"] == "finished"
    out = runner.messages("out")
    assert 20 <= len(out) < N, "stop() did not stop the job early"
    assert out == list(range(len(out)))
    assert committed(runner) == len(out) - 1  # the final commit covers exactly the processed prefix


def test_stop_drains_messages_in_flight_without_spinning() -> None:
    """stop() hands out nothing more, lets the messages in flight complete and commits them; the
    task waits for the slow one rather than polling in a busy loop."""
    mem = MemorySystem()
    app = StreamApplication("drain", config={"task.max.concurrency": 2})

    async def call(m: int) -> list[int]:
        await asyncio.sleep(0.4 if m == 1 else 0.05)  # 0 finishes first, 1 keeps the task busy
        return [m]

    app.input(mem.input("in", partitions=1)).async_flat_map(call, name="call").send_to(
        app.output(mem.output("out")))
    runner = LocalRunner(app, inputs={"in": list(range(10))}).start()
    wait_until(lambda: runner.status()["in_flight"] == 2)
    cpu, wall = time.process_time(), time.monotonic()
    runner.stop(timeout=5.0)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    assert runner.messages("out") == [0, 1]
    assert committed(runner) == 1
    assert wall > 0.2, "stop() did not wait for the message in flight"
    assert cpu < 0.5 * wall, f"{cpu:.2f}s of CPU while waiting {wall:.2f}s for a sleep"


def test_wait_returns_when_a_started_job_finishes() -> None:
    runner = LocalRunner(long_app(0.0), inputs={"in": list(range(50))})
    with pytest.raises(SamzaError):
        runner.wait()
    runner.start()
    assert runner.wait(timeout=5.0) is True
    assert runner.status()["state"] == "finished"
    assert runner.messages("out") == list(range(50))
    runner.stop()  # stopping a finished job is fine


def test_a_failing_job_reports_failed_and_stop_reraises() -> None:
    mem = MemorySystem()
    app = StreamApplication("bad")

    def boom(m: int) -> int:
        if m == 3:
            raise ZeroDivisionError("no")
        return m

    app.input(mem.input("in", partitions=1)).map(boom, name="boom").send_to(
        app.output(mem.output("out")))
    runner = LocalRunner(app, inputs={"in": list(range(10))}).start()
    assert runner.wait(timeout=5.0) is True
    status = runner.status()
    assert status["state"] == "failed"
    assert "bad-1-map-boom" in status["error"]
    with pytest.raises(TaskError) as err:
        runner.stop()
    assert err.value.offset == 3


def test_run_reraises_a_failure() -> None:
    mem = MemorySystem()
    app = StreamApplication("bad-run")
    app.input(mem.input("in", partitions=1)).map(lambda m: 1 // m, name="inv").send_to(
        app.output(mem.output("out")))
    with pytest.raises(TaskError) as err:
        LocalRunner(app, inputs={"in": [1, 0]}).run()
    assert err.value.op_id == "bad-run-1-map-inv"


def test_sigint_stops_run_cleanly_and_commits() -> None:
    runner = LocalRunner(long_app(), inputs={"in": list(range(N))})
    sent = threading.Event()

    def interrupt() -> None:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            c = runner.container
            if c is not None and c.status()["processed"] > 20:
                os.kill(os.getpid(), signal.SIGINT)
                sent.set()
                return
            time.sleep(0.005)

    t = threading.Thread(target=interrupt, daemon=True)
    t.start()
    runner.run()
    t.join(1.0)
    assert sent.is_set()
    out = runner.messages("out")
    assert 20 <= len(out) < N, "SIGINT did not stop the job early"
    assert out == list(range(len(out)))
    assert committed(runner) == len(out) - 1


def test_status_during_a_blocking_run_says_running() -> None:
    runner = LocalRunner(long_app(), inputs={"in": list(range(300))})
    states: list[tuple[str, bool]] = []

    def watch() -> None:
        wait_until(lambda: runner.container is not None and runner.status()["processed"] > 10)
        s = runner.status()
        states.append((s["state"], s["done"]))

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    runner.run()
    t.join(5.0)
    assert states == [("running", False)]
    assert runner.status()["state"] == "finished"


def test_progress_reports_throughput_and_checkpoints() -> None:
    progress = io.StringIO()
    app = long_app(0.0, **{"task.progress.ms": 50})
    runner = LocalRunner(app, inputs={"in": list(range(100))}, progress=progress).run()
    text = progress.getvalue()
    assert text.endswith("\n")
    last = text.strip().splitlines()[-1].split("\r")[-1]
    assert "processed" in last and "msg/s" in last
    assert "in[0]@99" in last
    assert runner.messages("out") == list(range(100))


def test_unknown_config_keys_are_rejected_naming_the_key() -> None:
    mem = MemorySystem()
    app = StreamApplication("cfg")
    app.input(mem.input("in")).sink(print, name="p")
    with pytest.raises(ConfigError, match="task.max.concurency"):
        LocalRunner(app, {"task.max.concurency": 4})
    with pytest.raises(TypeError):
        LocalRunner("not an app")  # type: ignore[arg-type]
