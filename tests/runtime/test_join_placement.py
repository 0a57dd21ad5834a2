"""A join that cannot meet is never silent (``task.join.partition.check``, docs/semantics.md rules
9 and 10): on the embedded local system, whose loads place each record by its key as a producer
does, a join whose key is not the key its stream is partitioned by fails the job by default with
one line naming the join, the key, both partitions and the fix; ``warn`` logs and goes on;
``off`` says nothing. A join after ``partition_by`` passes, and so do lookups into a table every
task holds whole."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import misjoin_app as apps
import pytest

from runtime import LocalRunner
from samza_dsl import StreamApplication
from samza_dsl.errors import JoinPartitionError, TaskError

REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "samza-dsl"
APP = str(REPO / "tests" / "runtime" / "misjoin_app.py")


def run(app: StreamApplication, tmp_path: Path, **config: Any) -> LocalRunner:
    """Runs ``app`` on the local system over its inputs. A table written from ``users-in``
    (not a side input) is filled by a first run, so that every lookup of the second comes
    after it."""
    given = {sid: msgs for sid, msgs in apps.inputs().items() if sid in app.spec().inputs}
    if "users-in" in given and "orders-by-id" in given:
        LocalRunner(app, {"job.dir": str(tmp_path / "job"), **config},
                    inputs={"users-in": given.pop("users-in")}).run().close()
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job"), **config}, inputs=given)
    try:
        return runner.run()
    finally:
        runner.close()


def values(runner: LocalRunner, stream: str) -> list[Any]:
    return [kv.value for kv in runner.messages(stream)]


#: the inputs each app of misjoin_app.py the CLI runs reads
USED = {"app": ("orders", "payments"), "fixed": ("orders", "payments"),
        "table_app": ("orders-by-id", "users-in")}


def cli(tmp_path: Path, ref: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``samza-dsl run misjoin_app.py:<ref>`` with its inputs from JSON Lines files."""
    given = apps.inputs()
    files = []
    for sid in USED[ref]:
        path = tmp_path / f"{sid}.jsonl"
        path.write_text("".join(json.dumps({"key": kv.key, "value": kv.value}) + "\n"
                                for kv in given[sid]))
        files += ["--input", f"{sid}={path}"]
    return subprocess.run([str(CLI), "run", f"{APP}:{ref}", *files, "-q", *argv],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("samza-dsl run: error:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


# -- the stream-stream join ---------------------------------------------------------------------

def test_a_join_on_another_key_than_the_streams_fails_by_default_naming_the_join(
        tmp_path: Path) -> None:
    with pytest.raises(TaskError) as err:
        run(apps.pairs(), tmp_path)
    text = str(err.value)
    cause = err.value.__cause__
    assert isinstance(cause, JoinPartitionError)
    assert err.value.op_id == "pairs-1-join-paid"
    assert cause.belongs != cause.read_from and cause.stream == "orders"
    assert f"the left key {cause.key!r} belongs to partition {cause.belongs} of stream 'orders'" \
        in text
    assert f"but the message was read from partition {cause.read_from}" in text
    assert ".partition_by(lambda kv: kv.value['order_id'], name=...) before the join" in text
    assert "task.join.partition.check=warn" in text
    assert "\n" not in text


def test_the_cli_run_fails_with_one_line_and_warns_at_the_start(tmp_path: Path) -> None:
    proc = cli(tmp_path, "app")
    assert proc.returncode != 0
    line = error_line(proc.stderr)
    assert "join 'pairs-1-join-paid': the left key 'o-" in line
    assert "belongs to partition" in line and "read from partition" in line
    assert "partition_by(" in line
    # the plan's warning comes first, before anything is processed
    warning = proc.stderr.index("plan warning: join 'pairs-1-join-paid': its left key "
                                "kv.value['order_id'] is not the key stream 'orders' is "
                                "partitioned by")
    assert warning < proc.stderr.index(line)


def test_warn_logs_and_goes_on_and_off_says_nothing(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="samza_dsl.join"):
        warned = run(apps.pairs(), tmp_path / "warn", **{"task.join.partition.check": "warn"})
    logged = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.join"]
    joined = len(values(warned, "paid"))
    assert 0 < joined < apps.N  # the join went on, and lost pairs as before
    assert logged and all("join 'pairs-1-join-paid': the " in m and "logged once per join side "
                          "and task" in m for m in logged)
    assert len(logged) <= 2 * 4  # at most once per side and task
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="samza_dsl.join"):
        quiet = run(apps.pairs(), tmp_path / "off", **{"task.join.partition.check": "off"})
    assert [r for r in caplog.records if r.name == "samza_dsl.join"] == []
    assert len(values(quiet, "paid")) == joined


def test_the_cli_warn_and_off(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "o").mkdir()
    warned = cli(tmp_path / "w", "app", "-c", "task.join.partition.check=warn")
    assert warned.returncode == 0, warned.stderr
    assert "belongs to partition" in warned.stderr
    off = cli(tmp_path / "o", "app", "-c", "task.join.partition.check=off")
    assert off.returncode == 0, off.stderr
    assert "belongs to partition" not in off.stderr


def test_a_join_after_partition_by_meets_every_pair_with_no_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        runner = run(apps.pairs(fix=True), tmp_path)
    assert len(values(runner, "paid")) == apps.N
    assert [r.getMessage() for r in caplog.records if "join" in r.getMessage()] == []
    assert runner.plan.warnings == []


def test_the_fixed_app_runs_from_the_cli_with_no_warning(tmp_path: Path) -> None:
    proc = cli(tmp_path, "fixed")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    assert f"out: {apps.N:,} message(s)" in proc.stdout


def test_virtual_tasks_split_a_partition_by_key_and_are_checked_too(tmp_path: Path) -> None:
    # one partition per input: every key is in it, but two virtual tasks split it by key
    with pytest.raises(TaskError) as err:
        run(apps.pairs(partitions=1), tmp_path, **{"job.elasticity.factor": 2})
    assert "key bucket" in str(err.value) and "job.elasticity.factor" in str(err.value)
    assert isinstance(err.value.__cause__, JoinPartitionError)
    fine = run(apps.pairs(partitions=1, fix=True), tmp_path / "fixed",
               **{"job.elasticity.factor": 2})
    assert len(values(fine, "paid")) == apps.N


def test_one_partition_and_one_task_has_nothing_to_check(tmp_path: Path) -> None:
    runner = run(apps.pairs(partitions=1), tmp_path)
    assert len(values(runner, "paid")) == apps.N


# -- join_table ---------------------------------------------------------------------------------

def test_a_lookup_on_another_key_than_the_streams_fails_by_default(tmp_path: Path) -> None:
    proc = cli(tmp_path, "table_app")
    assert proc.returncode != 0
    line = error_line(proc.stderr)
    assert "join_table 'lookups-local-1-join_table-with-user' on table 'users': the key " \
           "'user-" in line
    assert "of stream 'orders-by-id'" in line and "read from partition" in line
    assert "which lacks its key" in line
    assert "plan warning: join_table 'lookups-local-1-join_table-with-user'" in proc.stderr


def test_lookups_with_warn_go_on_and_miss_as_before(tmp_path: Path) -> None:
    runner = run(apps.lookups(), tmp_path, **{"task.join.partition.check": "warn"})
    named = values(runner, "named")
    assert len(named) == apps.N and 0 < named.count(None) < apps.N


def test_a_table_every_task_holds_whole_is_exempt(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        runner = run(apps.lookups("broadcast"), tmp_path)
    named = values(runner, "named")
    assert len(named) == apps.N and None not in named  # every lookup hits
    assert [r for r in caplog.records if r.name == "samza_dsl.join"] == []
    assert runner.plan.warnings == []


def test_a_side_input_table_is_held_by_partition_and_is_checked(tmp_path: Path) -> None:
    # a side input fills the table of the task that reads its partition (docs/semantics.md):
    # lookups on another key than the stream's miss there as anywhere, and say so
    lost = run(apps.lookups("side"), tmp_path / "warn", **{"task.join.partition.check": "warn"})
    assert values(lost, "named").count(None) > 0
    with pytest.raises(TaskError) as err:
        run(apps.lookups("side"), tmp_path / "fail")
    assert isinstance(err.value.__cause__, JoinPartitionError)
    assert "on table 'users'" in str(err.value)
