"""A stuck message is named, and a stuck run can be stopped: a callback timeout names the
operator, and the remote table and key (or the function) the message waits for; a run asked to
stop (SIGINT, SIGTERM, ``stop()``) stops within ``task.shutdown.ms`` even while a call never
returns, says what was in flight, and exits 130 / 143; a bounded run stopped before its inputs
ended says "interrupted" and exits 130. Real processes of ``samza-dsl run``, a real HTTP
service on 127.0.0.1 (``samza_dsl.testing.kv_service``), the embedded local log."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import LocalRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import CallbackTimeout, Interrupted
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner
from samza_dsl.testing.kv_service import HttpKV, KVService

CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
SHUTDOWN_MS = 1500
#: what a stop may take past task.shutdown.ms: the cancelled run's closing, on a busy machine
MARGIN = 4.0


@pytest.fixture
def service() -> Iterator[KVService]:
    with KVService({"u0": "Ada", "u1": "Bob", "u2": "Cy"}) as s:
        yield s


def _asked(service: KVService, key: str) -> bool:
    return any(key in keys for _, _, keys in list(service.log))


# --- the callback timeout names what the message waits for ---------------------------------------

def _remote_app(kv: HttpKV, how: str) -> StreamApplication:
    mem = MemorySystem()
    app = StreamApplication(f"wait-{how.replace('.', '-')}",
                            config={"task.callback.timeout.ms": 300})
    if how == "read_all":
        names = app.remote_table("names", read=kv.read, read_all=kv.read_all)
    else:
        names = app.remote_table("names", read=kv.read, write=kv.write)
    ids = app.input(mem.input("ids")).map(lambda i: KV(i, None), name="keyed")
    if how == "send_to":
        ids.map(lambda kv: KV(kv.key, "x"), name="lookup").send_to(names)
        return app
    out = app.output(mem.output("out"))
    if how in ("join_table", "read_all"):
        ids.join_table(names, combine=lambda m, r: r and r.value, name="lookup").send_to(out)
    else:
        class Get:
            def init(self, ctx: Any) -> None:
                self.names = ctx.table("names")

            async def __call__(self, m: KV[str, None]) -> list[Any]:
                return [await self.names.get(m.key)]

        ids.async_flat_map(Get(), name="lookup").send_to(out)
    return app


@pytest.mark.parametrize("how,op,call", [
    ("join_table", "wait-join_table-1-join_table-lookup", "read"),
    ("read_all", "wait-read_all-1-join_table-lookup", "read"),
    ("ctx.table", "wait-ctx-table-1-async_flat_map-lookup", "get"),
    ("send_to", "wait-send_to-1-send_to-2", "write")])
def test_a_remote_call_past_the_callback_timeout_names_table_operator_and_key(
        service: KVService, how: str, op: str, call: str) -> None:
    service.slow("u9", 5.0)
    app = _remote_app(HttpKV(service.url), how)
    with pytest.raises(CallbackTimeout) as err:
        TestRunner(app).add_input("ids", ["u1", "u9"]).run()
    e = err.value
    assert (e.op_id, e.table, e.key, e.offset) == (op, "names", "u9", 1)
    text = str(e)
    assert f"operator {op!r} waits on remote table 'names' ({call} of key 'u9')" in text
    assert "offset 1" in text and "task.callback.timeout.ms=300" in text
    assert "an async call may hang" not in text


def test_an_async_flat_map_past_the_callback_timeout_names_its_operator_and_function() -> None:
    mem = MemorySystem()
    app = StreamApplication("hang-fn", config={"task.callback.timeout.ms": 200})

    async def enrich(m: int) -> list[int]:
        if m == 3:
            await asyncio.Event().wait()  # never set
        return [m]

    app.input(mem.input("in")).async_flat_map(enrich, name="enrich").send_to(
        app.output(mem.output("out")))
    with pytest.raises(CallbackTimeout) as err:
        TestRunner(app).add_input("in", list(range(6))).run()
    text = str(err.value)
    assert err.value.op_id == "hang-fn-1-async_flat_map-enrich" and err.value.offset == 3
    assert re.search(r"operator 'hang-fn-1-async_flat_map-enrich' waits in "
                     r".*enrich\(\) at .*test_stop_in_flight\.py:\d+", text), text


# --- a run asked to stop stops within task.shutdown.ms --------------------------------------------

HANG_APP = textwrap.dedent('''
    import asyncio
    import os

    from samza_dsl import KV, StreamApplication
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import LocalSystem
    from samza_dsl.testing.kv_service import HttpKV

    SERDE = KVSerde(StringSerde(), JsonSerde())
    app = StreamApplication("hang", config={"task.commit.ms": 100,
                                            "task.shutdown.ms": SHUTDOWN_MS})
    local = LocalSystem("local")
    events = app.input(local.input("events", serde=SERDE, partitions=2))
    out = app.output(local.output("out", serde=SERDE, partitions=2))
    if os.environ["HOW"] == "remote":  # a remote table whose service never answers one key
        kv = HttpKV(os.environ["KV_URL"], timeout=3600)
        names = app.remote_table("names", read=kv.read)
        events.join_table(names, key=lambda kv: kv.value["user"],
                          combine=lambda m, r: KV(m.key, r and r.value),
                          name="lookup").send_to(out)
    else:  # slow: each message takes a while, and all of them end
        async def slow(kv):
            await asyncio.sleep(0.05)
            return [kv]
        events.async_flat_map(slow, name="slow").send_to(out)


    def sample_input(n):
        return [KV(f"e{i}", {"user": "stuck" if i == 5 else f"u{i % 3}"}) for i in range(n)]
''').replace("SHUTDOWN_MS", str(SHUTDOWN_MS))


def _start(tmp_path: Path, how: str, containers: int, service: KVService | None,
           n: int = 20) -> subprocess.Popen[str]:
    (tmp_path / "hang_app.py").write_text(HANG_APP)
    env = {**os.environ, "HOW": how, "KV_URL": service.url if service else ""}
    args = [CLI, "run", "hang_app.py:app", "--sample", str(n), "-q"]
    if containers > 1:
        args += ["--containers", str(containers)]
    return subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen[str], sig: int) -> tuple[float, str, str]:
    """Seconds from ``sig`` to the process's exit, its standard output and error."""
    proc.send_signal(sig)
    sent = time.monotonic()
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return time.monotonic() - sent, out, err


def _wait(what: str, ready: Any, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the run exited before {what}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


@pytest.mark.parametrize("containers", [1, 2])
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_run_stuck_in_a_remote_call_stops_within_shutdown_ms_naming_what_was_in_flight(
        tmp_path: Path, service: KVService, containers: int, sig: int, code: int) -> None:
    service.slow("stuck", 3600)
    proc = _start(tmp_path, "remote", containers, service)
    _wait("the call that never returns", lambda: _asked(service, "stuck"), proc)
    time.sleep(0.3)  # the other messages are done: only the stuck one is in flight
    took, out, err = _stop(proc, sig)
    assert proc.returncode == code, err
    assert took < SHUTDOWN_MS / 1000 + MARGIN, f"took {took:.1f} s to stop:\n{err}"
    assert took >= SHUTDOWN_MS / 1000 - 0.1, "it did not wait task.shutdown.ms for the drain"
    assert "Traceback" not in err and "Unclosed" not in err, err
    line = next(ln for ln in err.splitlines() if "in flight" in ln)
    assert f"did not stop within task.shutdown.ms={SHUTDOWN_MS}" in line
    assert re.search(r"task 'Partition \d': 1 message in flight, the oldest at stream 'events' "
                     r"partition \d offset \d+ for [\d.]+ s: operator 'hang-1-join_table-lookup' "
                     r"waits on remote table 'names' \(read of key 'stuck'\)", line), line
    assert err.rstrip().splitlines()[-1].startswith("samza-dsl run: interrupted: "), err
    assert "this run's outputs" not in out


@pytest.mark.parametrize("containers", [1, 2])
def test_a_bounded_run_stopped_with_ctrl_c_says_interrupted_and_exits_130(
        tmp_path: Path, containers: int) -> None:
    from runtime.local.log import LocalLog

    n = 400  # 50 ms a message: what the second run does is most of the test's time
    proc = _start(tmp_path, "slow", containers, None, n=n)
    log_dir = tmp_path / ".samza" / "hang-1" / "logs" / "local"

    def some_out() -> bool:
        if not (log_dir / "data.mdb").exists():
            return False
        with LocalLog(log_dir) as log:  # the run creates its streams after the log's file
            parts = log.partitions("out")
            return parts is not None and sum(log.end_offset("out", p)
                                             for p in range(parts)) > 50

    _wait("outputs", some_out, proc)
    took, out, err = _stop(proc, signal.SIGINT)
    assert proc.returncode == 130, err
    assert took < SHUTDOWN_MS / 1000 + MARGIN
    assert "samza-dsl run: interrupted by SIGINT before its inputs ended" in err, err
    assert "this run's outputs" not in out and "out:" not in out, out  # no normal summary
    # what it processed was committed: the next run does the rest, and ends
    again = subprocess.run([CLI, "run", "hang_app.py:app", "-q"], cwd=tmp_path,
                           env={**os.environ, "HOW": "slow", "KV_URL": ""},
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    rest = int(re.search(r"^out: ([\d,]+)", again.stdout, re.M).group(1).replace(",", ""))
    assert 0 < rest < n


def test_stop_of_a_started_run_stuck_in_a_remote_call_raises_within_shutdown_ms(
        service: KVService) -> None:
    service.slow("stuck", 3600)
    kv = HttpKV(service.url, timeout=3600)
    mem = MemorySystem()
    app = StreamApplication("stuck-api", config={"task.shutdown.ms": 500})
    names = app.remote_table("names", read=kv.read)
    app.input(mem.input("ids")).map(lambda i: KV(i, None)).join_table(
        names, combine=lambda m, r: r and r.value, name="lookup").send_to(
        app.output(mem.output("out")))
    runner = LocalRunner(app, inputs={"ids": ["u1", "stuck", "u2"]}).start()
    deadline = time.monotonic() + 30
    while not _asked(service, "stuck"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    started = time.monotonic()
    with pytest.raises(Interrupted) as err:
        runner.stop(timeout=30)
    assert time.monotonic() - started < 0.5 + MARGIN
    text = str(err.value)
    assert "did not stop within task.shutdown.ms=500 of the stop (stop())" in text
    assert "operator 'stuck-api-1-join_table-lookup' waits on remote table 'names' (read of " \
           "key 'stuck')" in text
    assert err.value.signal is None and runner.status()["state"] == "failed"
