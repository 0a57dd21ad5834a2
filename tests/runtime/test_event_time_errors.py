"""An input's ``event_time`` that fails on a record (docs/semantics.md rules 8 and 14) stops the job as
an operator's failure does: a ``TaskError`` naming the input's event_time, the task, the stream,
the partition and the offset, saying how to fix or skip the record, never a bare exception. On the
command line it is one line with exit code 2, and ``--skip`` passes over the record."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime import LocalRunner, TestRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.errors import TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem

SERDE = KVSerde(StringSerde(), JsonSerde())
CLI = Path(sys.executable).parent / "samza-dsl"
REPO = Path(__file__).resolve().parents[2]


def ts(kv: KV[str, Any]) -> float:
    return kv.value["ts"]


async def same(kv: KV[str, Any]) -> list[KV[str, Any]]:
    await asyncio.sleep(0.001)
    return [kv]


def build(system: Any, *, factor: int = 1, async_step: bool = False,
          event_time: Any = ts) -> StreamApplication:
    app = StreamApplication("etf", config={"job.elasticity.factor": factor})
    s = app.input(system.input("views", serde=SERDE, partitions=2, event_time=event_time))
    if async_step:
        s = s.async_flat_map(same, name="same")
    (s.window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                     fold=lambda m, n: n + 1,
                                     event_time=lambda kv: float(kv.value["ts"])), name="w")
     .map(lambda p: KV(p.key.key, p.message), name="record")
     .send_to(app.output(system.output("counts", serde=SERDE, partitions=1))))
    return app


def views(bad: Any) -> dict[int, list[Any]]:
    """Partition 1, offset 2 holds a record whose ``ts`` is ``bad`` (missing when ...)."""
    good = [KV(f"u{i % 3}", {"ts": i * 1.0}) for i in range(5)]
    record = {"page": "/"} if bad is ... else {"ts": bad}
    return {0: good, 1: [*good[:2], KV("u1", record), *good[2:]]}


def check(err: TaskError, *fragments: str) -> None:
    text = str(err)
    assert (err.stream, err.partition, err.offset) == ("views", 1, 2)
    assert err.task is not None and err.task.startswith("Partition 1")
    assert "the event_time of input 'views' failed" in text
    assert "stream 'views' partition 1 offset 2" in text
    assert "--skip views:1:2" in text and "Fix the record" in text
    for fragment in fragments:
        assert fragment in text, text


BAD = [
    pytest.param(..., ("KeyError: 'ts'",), id="missing-field"),
    pytest.param("soon", ("event_time returned 'soon' (str)",), id="not-a-number"),
]


@pytest.mark.parametrize(("async_step", "factor"), [(False, 1), (True, 1), (False, 2)],
                         ids=["plain", "async", "elastic"])
@pytest.mark.parametrize(("bad", "fragments"), BAD)
def test_test_runner_names_the_record(bad: Any, fragments: tuple[str, ...], async_step: bool,
                                      factor: int) -> None:
    app = build(MemorySystem(), factor=factor, async_step=async_step)
    with pytest.raises(TaskError) as info:
        TestRunner(app).add_input("views", views(bad)).run(timeout=60)
    check(info.value, *fragments)


def local_failure(app: StreamApplication, job_dir: str, data: dict[int, list[Any]]) -> TaskError:
    """The TaskError a LocalRunner run of ``app`` over ``data`` stops with."""
    runner = LocalRunner(app, {"job.dir": job_dir}, inputs={"views": data})
    try:
        with pytest.raises(TaskError) as info:
            runner.run()
    finally:
        runner.close()
    return info.value


@pytest.mark.parametrize(("bad", "fragments"), BAD)
def test_local_runner_names_the_record(bad: Any, fragments: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check(local_failure(build(LocalSystem("local")), tmp, views(bad)), *fragments)


def build_repartitioned(system: Any, shape: str) -> StreamApplication:
    """The input's times count at the end of each batch: its stage has no window. The messages
    are handed out a batch at a time (``partition_by``, or a map then ``send_to``)."""
    app = StreamApplication("etf-batched")
    s = app.input(system.input("views", serde=SERDE, partitions=2, event_time=ts))
    out = app.output(system.output("counts", serde=SERDE, partitions=2))
    if shape == "send_to":
        s.map(lambda kv: KV(kv.key, {"ts": kv.value["ts"]}), name="copy").send_to(out)
        return app
    (s.partition_by(lambda kv: kv.key, lambda kv: kv.value, name="by-user")
     .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                    fold=lambda m, n: n + 1,
                                    event_time=lambda kv: float(kv.value["ts"])), name="w")
     .map(lambda p: KV(p.key.key, p.message), name="record")
     .send_to(out))
    return app


@pytest.mark.parametrize("shape", ["partition_by", "send_to"])
@pytest.mark.parametrize("system", ["memory", "local"])
@pytest.mark.parametrize(("bad", "fragments"), BAD)
def test_an_input_handed_out_in_batches_names_the_record(bad: Any, fragments: tuple[str, ...],
                                                          system: str, shape: str,
                                                          tmp_path: Path) -> None:
    if system == "local":
        check(local_failure(build_repartitioned(LocalSystem("local"), shape), str(tmp_path),
                            views(bad)), *fragments)
        return
    app = build_repartitioned(MemorySystem(), shape)
    with pytest.raises(TaskError) as info:
        TestRunner(app).add_input("views", views(bad)).run(timeout=60)
    check(info.value, *fragments)


def test_a_number_of_another_type_is_taken_as_seconds() -> None:
    from decimal import Decimal

    # the input's JSON carries no Decimal (a job reads "2.5"): event_time makes one
    data = {0: [KV("u", {"ts": 1.0}), KV("u", {"ts": "2.5"}), KV("u", {"ts": 11})]}
    app = build(MemorySystem(), event_time=lambda kv: (Decimal(kv.value["ts"])
                                                       if isinstance(kv.value["ts"], str)
                                                       else kv.value["ts"]))
    result = TestRunner(app).add_input("views", data).run(timeout=60)
    assert sorted(kv.value for kv in result.messages("counts")) == [1, 2]


APP_FILE = '''
from datetime import timedelta

from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

SERDE = KVSerde(StringSerde(), JsonSerde())
local = LocalSystem("local")
app = StreamApplication("etcli")
views = app.input(local.input("views", serde=SERDE, partitions=1,
                              event_time=lambda kv: kv.value["ts"]))
(views.window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                     fold=lambda m, n: n + 1,
                                     event_time=lambda kv: kv.value["ts"]), name="w")
 .map(lambda p: KV(p.key.key, p.message), name="record")
 .send_to(app.output(local.output("counts", serde=SERDE, partitions=1))))
'''


def cli(cwd: Path, *argv: str) -> tuple[int, str, str]:
    assert CLI.exists(), f"the samza-dsl console script is not installed next to {sys.executable}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's code, as pytest runs it
    proc = subprocess.run([str(CLI), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def test_the_cli_says_it_in_one_line_and_skip_passes_over_the_record(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(APP_FILE), encoding="utf-8")
    records = [{"key": "u", "value": {"ts": 1.0}}, {"key": "u", "value": {"page": "/"}},
               {"key": "u", "value": {"ts": 2.0}}]
    (tmp_path / "views.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records),
                                          encoding="utf-8")
    code, _, err = cli(tmp_path, "run", "app.py:app", "-q", "--input", "views=views.jsonl")
    assert code == 2, err
    assert "Traceback" not in err, err
    *loaded, line = err.strip().splitlines()
    assert all(x.startswith("loaded ") for x in loaded), err  # what --input loaded
    assert line.startswith("samza-dsl run: error: the event_time of input 'views' failed")
    assert "partition 0 offset 1" in line and "KeyError: 'ts'" in line
    assert "--skip views:0:1" in line
    code, out, err = cli(tmp_path, "run", "app.py:app", "-q", "--skip", "views:0:1")
    assert code == 0, err
    assert "Traceback" not in err, err
