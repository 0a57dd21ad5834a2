"""A user function that raises: the error names the user's own file and line (the innermost frame
of the application's code, not samza-dsl's, the standard library's or a package's),
``samza-dsl run --traceback`` prints the whole stack, and ``--skip`` is suggested only for a
record that fails alone, not when the function fails on message after message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from samza_dsl import StreamApplication
from samza_dsl.errors import TaskError
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

CLI = str(Path(sys.executable).parent / "samza-dsl")

APP = '''
import json

from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde
from samza_dsl.systems import LocalSystem

local = LocalSystem("local")
app = StreamApplication("fails", config={{"job.default.system": "local"}})


def parse(m):
    return int(m["n"]) * 2


app.input(local.input("events", serde=JsonSerde(), partitions=1)).map(parse, name="parse") \\
    .send_to(app.output(local.output("doubled", serde=JsonSerde())))


def sample_input(n):
    return {{"events": [{{"x": 1}} if {bad} else {{"n": i}} for i in range(n)]}}
'''
PARSE_LINE = 13  # the line of `return int(m["n"]) * 2` in APP


def run(tmp_path: Path, bad: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "fail_app.py").write_text(APP.format(bad=bad))
    proc = subprocess.run([CLI, "run", "fail_app.py:app", "--sample", "100", "-q", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 2, proc.stderr
    return proc


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("samza-dsl run: error: "), proc.stderr
    return lines[-1]


def test_a_record_that_fails_alone_names_the_users_line_and_is_offered_to_skip(
        tmp_path: Path) -> None:
    line = error_line(run(tmp_path, "i == 30"))
    assert "offset 30: KeyError: 'n' in parse() at fail_app.py:13." in line
    assert "--skip events:0:30` passes over it once" in line
    assert line.endswith("; --traceback shows the whole stack")
    assert "Traceback" not in run(tmp_path, "i == 30").stderr


def test_a_function_failing_on_a_fifth_of_the_messages_is_not_offered_to_skip(
        tmp_path: Path) -> None:
    line = error_line(run(tmp_path, "i % 5 == 0"))
    assert "offset 0: KeyError: 'n' in parse() at fail_app.py:13." in line
    assert "It failed on the first message, so it may fail on many: fix the " \
           "function or guard against such messages." in line
    assert "--skip" not in line


def test_a_function_failing_soon_says_after_how_many(tmp_path: Path) -> None:
    line = error_line(run(tmp_path, "i % 5 == 4"))
    assert "offset 4: KeyError: 'n' in parse() at fail_app.py:13. It failed after only 4 " \
           "message(s) went through, so it may fail on many" in line
    assert "--skip" not in line


def test_what_went_through_before_the_checkpoint_counts_for_a_record_that_fails_alone(
        tmp_path: Path) -> None:
    (tmp_path / "fail_app.py").write_text(APP.format(bad="False"))
    first = subprocess.run([CLI, "run", "fail_app.py:app", "--sample", "50", "-q"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    (tmp_path / "more.jsonl").write_text('{"n": 1}\n{"x": 1}\n{"n": 2}\n')
    again = subprocess.run([CLI, "run", "fail_app.py:app", "--input", "events=more.jsonl",
                            "--append", "-q"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 2, again.stderr
    line = error_line(again)  # the second message of this run, after 51 in all
    assert "offset 51: KeyError: 'n' in parse() at fail_app.py:13." in line
    assert "--skip events:0:51` passes over it once" in line


def test_traceback_prints_the_whole_stack_then_the_one_line_error(tmp_path: Path) -> None:
    proc = run(tmp_path, "i == 30", "--traceback")
    err = proc.stderr
    assert err.count("Traceback (most recent call last):") == 2  # the cause, then the error
    assert f'fail_app.py", line {PARSE_LINE}, in parse' in err
    assert 'return int(m["n"]) * 2' in err
    assert "The above exception was the direct cause of the following exception" in err
    assert err.index("KeyError: 'n'") < err.index("samza_dsl.errors.TaskError: operator")
    line = error_line(proc)
    assert "in parse() at fail_app.py:13" in line and "--traceback shows" not in line


def _helper(m: str) -> int:
    return int(m)  # the innermost frame of this file: the test's own code


def test_the_innermost_frame_of_the_users_code_is_named_not_the_librarys() -> None:
    import json

    app, mem = StreamApplication("where"), MemorySystem()
    words = mem.input("words")
    app.input(words).map(lambda m: _helper(json.loads(m)), name="parse") \
        .send_to(app.output(mem.output("out")))
    with pytest.raises(TaskError) as info:
        TestRunner(app).add_input(words, ["1", "x"]).run()
    # json.loads fails in the standard library: the line named is the lambda's, which called it
    here = Path(__file__).relative_to(Path.cwd()) if Path(__file__).is_relative_to(Path.cwd()) \
        else Path(__file__)
    lineno = test_the_innermost_frame_of_the_users_code_is_named_not_the_librarys \
        .__code__.co_firstlineno + 5
    assert f"JSONDecodeError: Expecting value: line 1 column 1 (char 0) in " \
           f"test_the_innermost_frame_of_the_users_code_is_named_not_the_librarys.<locals>." \
           f"<lambda>() at {here}:{lineno}." in str(info.value)

    app2, mem2 = StreamApplication("where2"), MemorySystem()
    nums = mem2.input("nums")
    app2.input(nums).map(_helper, name="parse").send_to(app2.output(mem2.output("out")))
    with pytest.raises(TaskError) as info:
        TestRunner(app2).add_input(nums, ["1", "x"]).run()
    assert f"in _helper() at {here}:{_helper.__code__.co_firstlineno + 1}." in str(info.value)


@pytest.mark.parametrize("config", [{}, {"job.container.thread.pool.size": 2}],
                         ids=["inline", "thread-pool"])
@pytest.mark.parametrize(("bad", "says"), [
    (0, "It failed on the first message, so it may fail on many"),
    (4, "It failed after only 4 message(s) went through, so it may fail on many"),
])
def test_a_message_completed_off_the_loop_counts_only_those_before_it(
        config: dict[str, int], bad: int, says: str) -> None:
    """A function run in the thread pool fails after the message was counted as handed out:
    its error counts the messages before it, as when it runs inline."""
    app, mem = StreamApplication("counted", config=config), MemorySystem()
    nums = mem.input("nums")
    app.input(nums).map(lambda m: 1 // (m - bad), name="inverse") \
        .send_to(app.output(mem.output("out")))
    with pytest.raises(TaskError) as info:
        TestRunner(app).add_input(nums, list(range(20))).run()
    assert f"offset {bad}: ZeroDivisionError" in str(info.value)
    assert says in str(info.value)
    assert "--skip" not in str(info.value)
