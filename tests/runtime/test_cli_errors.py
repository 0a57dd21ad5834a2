"""A user's mistake on the command line is one line on standard error saying what is wrong and
what to do, with exit code 2 and no traceback, in every command. Each case runs the installed
``samza-dsl`` console script in a fresh directory, as a user would."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "samza-dsl"
APP = str(REPO / "examples/page_view_counts.py") + ":app"
JOB = "page-view-counts-1"

BAD_PLAN = '''
from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

system = LocalSystem("local")
app = StreamApplication("bad-plan")
serde = KVSerde(StringSerde(), JsonSerde())
a = app.input(system.input("a", serde=serde, partitions=2))
b = app.input(system.input("b", serde=serde, partitions=3))
out = app.output(system.output("out", serde=serde))
a.join(b, key=lambda m: m.key, other_key=lambda m: m.key, combine=lambda x, y: x, ttl=60,
       name="j").send_to(out)


def broken():
    raise RuntimeError("a bug in the application's own code")
'''


def cli(cwd: Path, *argv: str, pipe_to: str | None = None,
        env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Runs ``samza-dsl *argv`` in ``cwd``; with ``pipe_to``, through a shell into that command.
    The shell line quotes each word of ours (the console script's path, the application's path):
    nothing depends on where the repository or the virtual environment lies, or what it is named."""
    assert CLI.exists(), f"the samza-dsl console script is not installed next to {sys.executable}"
    words = [str(CLI), *argv]
    cmd: str | list[str] = words if pipe_to is None else f"{shlex.join(words)} | {pipe_to}"
    proc = subprocess.run(cmd, cwd=cwd, shell=pipe_to is not None, capture_output=True,
                          text=True, timeout=120, check=False,
                          env=None if env is None else {**os.environ, **env})
    return proc.returncode, proc.stdout, proc.stderr


def one_line_error(code: int, err: str, command: str, *fragments: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"samza-dsl {command}: error: "), err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in {err!r}"


def views_file(path: Path, n: int) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"key": f"user-{i % 30}",
                                "value": {"page": "/home", "bot": False, "ts": 1.7e9 + i}}) + "\n")
    return path


def test_dump_of_a_job_that_never_ran_says_so_and_creates_nothing(tmp_path: Path) -> None:
    code, _, err = cli(tmp_path, "dump", APP, "page-views")
    one_line_error(code, err, "dump", f"job {JOB!r} has not run", f".samza/{JOB}", "samza-dsl run")
    assert list(tmp_path.iterdir()) == []
    code, _, err = cli(tmp_path, "compact", APP)
    one_line_error(code, err, "compact", "has not run", f".samza/{JOB}")
    code, _, err = cli(tmp_path, "reset", APP)  # nothing to forget: not an error
    assert code == 0 and "nothing to reset" in err, err
    assert list(tmp_path.iterdir()) == []


def test_dump_of_an_unknown_stream_lists_the_streams(tmp_path: Path) -> None:
    code, _, err = cli(tmp_path, "load", APP, "page-views", str(views_file(tmp_path / "v.jsonl", 3)))
    assert code == 0, err
    code, _, err = cli(tmp_path, "dump", APP, "page-veiws")
    one_line_error(code, err, "dump", "'page-veiws' is not a stream",
                   "(did you mean 'page-views'?)", "its streams: logins, page-view-counts, ")


def test_a_mistyped_stream_gets_the_closest_name(tmp_path: Path) -> None:
    views = str(views_file(tmp_path / "v.jsonl", 3))
    code, _, err = cli(tmp_path, "load", APP, "page-veiws", views)
    one_line_error(code, err, "load", "'page-veiws' is not a stream",
                   "(did you mean 'page-views'?)")
    code, _, err = cli(tmp_path, "run", APP, "--input", f"page-veiws={views}")
    one_line_error(code, err, "run", "'page-veiws': not an input", "(did you mean 'page-views'?)",
                   "inputs: logins, page-views")


def test_a_missing_input_file_names_it(tmp_path: Path) -> None:
    code, _, err = cli(tmp_path, "load", APP, "page-views", "nope.jsonl")
    one_line_error(code, err, "load", "nope.jsonl", "No such file", str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # a load that failed made no job
    code, _, err = cli(tmp_path, "run", APP, "-q", "--input", "page-views=nope.jsonl")
    one_line_error(code, err, "run", "nope.jsonl", "No such file")


def test_invalid_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    bad = views_file(tmp_path / "views.jsonl", 2)
    with open(bad, "ab") as f:
        f.write(b'{"key": "user-1", "value": {"page": "/caf\xe9", "ts": 1}}\n')
    code, _, err = cli(tmp_path, "load", APP, "page-views", str(bad))
    one_line_error(code, err, "load", "views.jsonl:3: not UTF-8", "0xe9")
    assert not (tmp_path / ".samza").exists()  # a load that failed made no job
    code, _, err = cli(tmp_path, "run", APP, "-q", "--input", f"page-views={bad}")
    one_line_error(code, err, "run", "views.jsonl:3: not UTF-8")


def test_a_load_into_an_unknown_stream_makes_no_job(tmp_path: Path) -> None:
    views = views_file(tmp_path / "v.jsonl", 2)
    code, _, err = cli(tmp_path, "load", APP, "page-veiws", str(views))
    one_line_error(code, err, "load", "'page-veiws' is not a stream", "page-views")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.jsonl"]
    # an intermediate stream is a stream of the job too
    code, _, err = cli(tmp_path, "load", APP, "page-view-counts-1-partition_by-logins-by-user",
                       str(views))
    assert code == 0, err


def dump_into_a_closed_pipe(cwd: Path, app: str) -> None:
    code, _, err = cli(cwd, "load", app, "page-views", str(views_file(cwd / "v.jsonl", 20000)))
    assert code == 0, err
    code, out, err = cli(cwd, "dump", app, "page-views", pipe_to="head -n 1")
    assert code == 0 and err == "", err
    assert out.count("\n") == 1 and '"key"' in out


def test_dump_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    dump_into_a_closed_pipe(tmp_path, APP)


def test_commands_do_not_depend_on_the_name_of_the_clone(tmp_path: Path) -> None:
    """``git clone`` makes a folder named ``samza-dsl``: an application in it, run from it, whose
    path holds the command's own name (and a space), is named and found as any other."""
    clone = tmp_path / "my clones" / "samza-dsl"
    (clone / "examples").mkdir(parents=True)
    shutil.copy(REPO / "examples/page_view_counts.py", clone / "examples")
    app = str(clone / "examples/page_view_counts.py") + ":app"
    dump_into_a_closed_pipe(clone, app)
    code, _, err = cli(clone, "dump", "examples/page_view_counts.py:app", "page-veiws")
    one_line_error(code, err, "dump", "'page-veiws'", "page-views")


@pytest.mark.parametrize("command, argv, fragment", [
    ("run", ["--sample", "-5"], "argument --sample: takes a number >= 0, got -5"),
    ("run", ["--sample", "many"], "argument --sample: takes a whole number, got 'many'"),
    ("run", ["--show", "-1"], "argument --show: takes a number >= 0"),
    ("dump", ["page-views", "--limit", "-3"], "argument --limit: takes a number >= 1, got -3"),
    ("compact", ["--batch", "0"], "argument --batch: takes a number >= 1"),
    ("run", ["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_bad_numbers_and_flags_are_refused(tmp_path: Path, command: str, argv: list[str],
                                           fragment: str) -> None:
    code, _, err = cli(tmp_path, command, APP, *argv)
    one_line_error(code, err, command, fragment, f"see samza-dsl {command} --help")
    assert list(tmp_path.iterdir()) == []


def test_bad_app_specs_config_and_plans(tmp_path: Path) -> None:
    (tmp_path / "bad_plan.py").write_text(BAD_PLAN, encoding="utf-8")
    cases = [
        (["plan", "no_such_module.py:app"], "'no_such_module.py' does not exist"),
        (["plan", "no_such_package.mod:app"], "cannot import application module"),
        (["plan", f"{APP[:-4]}:nope"], "has no attribute 'nope'"),
        (["run", APP, "-c", "task.window.ms"], "-c takes KEY=VALUE, got 'task.window.ms'"),
        (["run", APP, "-c", "task.max.concurency=4"],
         "unknown config key 'task.max.concurency' (did you mean 'task.max.concurrency'?)"),
        (["dump", APP, "page-views", "-c", "task.commit.ms=soon"], "task.commit.ms='soon'"),
        (["plan", "bad_plan.py:app"], "join 'bad-plan-1-join-j'"),
    ]
    for argv, fragment in cases:
        code, _, err = cli(tmp_path, *argv)
        one_line_error(code, err, argv[0], fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad_plan.py"]


@pytest.mark.parametrize("pair, meant", [
    ("strems.page-views.retention.ms=5", "streams.page-views.retention.ms"),
    ("metrics.reporter=prometheus", "metrics.reporters"),
    ("max.concurrency=4", "task.max.concurrency"),
])
def test_a_config_typo_outside_task_and_job_stops_the_run_before_it_starts(
        tmp_path: Path, pair: str, meant: str) -> None:
    views = views_file(tmp_path / "views.jsonl", 20)
    code, out, err = cli(tmp_path, "run", APP, "-q", "--input", f"page-views={views}",
                         "-c", pair)
    key = pair.partition("=")[0]
    one_line_error(code, err, "run", f"unknown config key {key!r} (did you mean {meant!r}?)",
                   "user.*")
    assert out == ""
    assert not (tmp_path / ".samza").exists()  # nothing ran, nothing was loaded


def test_a_bug_still_shows_its_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad_plan.py").write_text(BAD_PLAN, encoding="utf-8")
    code, _, err = cli(tmp_path, "plan", "bad_plan.py:broken")
    assert code == 1, err
    assert "Traceback" in err and "RuntimeError: a bug in the application's own code" in err


def test_a_skip_of_a_partition_the_input_does_not_have(tmp_path: Path) -> None:
    views = views_file(tmp_path / "v.jsonl", 3)
    code, _, err = cli(tmp_path, "run", APP, "-q", "--input", f"page-views={views}", "--skip",
                       "page-views:4:0")
    one_line_error(code, err, "run", "--skip page-views:4:0: input 'page-views' has 4 "
                   "partition(s), 0 to 3", "samza-dsl dump APP page-views --offsets")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.jsonl"]  # nothing loaded


@pytest.mark.slow
@pytest.mark.parametrize("argv, env, fragment", [
    (["--master", "bogus"], None, "Master must either be yarn or start with spark, k8s, or local"),
    ([], {"JAVA_HOME": "/no/such/java"}, "/no/such/java/bin/java: No such file or directory"),
], ids=["unknown-master", "no-java"])
def test_spark_that_does_not_start_says_why(tmp_path: Path, argv: list[str],
                                            env: dict[str, str] | None, fragment: str) -> None:
    views = tmp_path / "views.jsonl"
    views.write_text(json.dumps({"country": "NL", "ts": 1.7e9, "bot": False}) + "\n")
    app = str(REPO / "examples/reprocess_page_views.py") + ":app"
    code, out, err = cli(tmp_path, "reprocess", app, "--input", f"page-views={views}",
                         "--no-progress", *argv, env=env)
    master = "bogus" if argv else "local[2]"
    one_line_error(code, err, "reprocess", f"Spark did not start (master {master!r}): ",
                   fragment, "JAVA_HOME")
    assert out == ""


def test_a_plan_written_to_a_new_directory_makes_it(tmp_path: Path) -> None:
    code, _, err = cli(tmp_path, "plan", APP, "--format", "json", "-o", "plans/today/plan.json")
    assert code == 0, err
    assert json.loads((tmp_path / "plans" / "today" / "plan.json").read_text())
    (tmp_path / "taken").write_text("a file, not a directory\n")
    code, _, err = cli(tmp_path, "plan", APP, "-o", "taken/plan.txt")
    one_line_error(code, err, "plan", "cannot write the plan to 'taken/plan.txt'")


def test_load_and_dump_help_name_both_places_a_stream_can_be(tmp_path: Path) -> None:
    for command in ("load", "dump"):
        code, out, _ = cli(tmp_path, command, "-h")
        assert code == 0
        text = " ".join(out.split())
        assert "embedded local log" in text and "Kafka topic" in text, out


def test_deeply_nested_json_names_the_file_and_line(tmp_path: Path) -> None:
    bad = views_file(tmp_path / "views.jsonl", 2)
    with open(bad, "a", encoding="utf-8") as f:
        f.write('{"key": "user-1", "value": ' + "[" * 5000 + "]" * 5000 + "}\n")
    code, _, err = cli(tmp_path, "load", APP, "page-views", str(bad))
    one_line_error(code, err, "load", "views.jsonl:3:", "nested")
    assert not (tmp_path / ".samza").exists()  # a load that failed made no job
    code, _, err = cli(tmp_path, "run", APP, "-q", "--input", f"page-views={bad}")
    one_line_error(code, err, "run", "views.jsonl:3:", "nested")


def _nested_view(levels: int) -> str:
    """A page view whose value nests ``levels`` levels in all (its outer object counts 1)."""
    inner = "[" * (levels - 2) + "]" * (levels - 2)
    return json.dumps({"key": "user-1", "value": {"page": "/", "ts": 1, "x": 0}}).replace(
        '"x": 0', f'"x": {inner}') + "\n"


def test_load_and_run_take_messages_as_deep_as_each_other(tmp_path: Path) -> None:
    from samza_dsl.json_text import MAX_JSON_DEPTH

    # as deep as the limit: loaded, then run reads it (no poison record at a shallower depth)
    ok = tmp_path / "ok.jsonl"
    ok.write_text(_nested_view(MAX_JSON_DEPTH))
    code, _, err = cli(tmp_path, "load", APP, "page-views", str(ok))
    assert code == 0, err
    code, out, err = cli(tmp_path, "run", APP)
    assert code == 0 and "in: 1 new message(s) (1 from page-views" in out + err, out + err
    # one level deeper, or 997: refused by load and by run --input alike, the depth named
    for levels in (MAX_JSON_DEPTH + 1, 997):
        deep = tmp_path / f"deep-{levels}.jsonl"
        deep.write_text(views_file(tmp_path / "v.jsonl", 1).read_text() + _nested_view(levels))
        for command in (["load", APP, "page-views", str(deep)],
                        ["run", APP, "-q", "--input", f"page-views={deep}"]):
            code, _, err = cli(tmp_path, *command)
            one_line_error(code, err, command[0], f"deep-{levels}.jsonl:2: the message is nested "
                           f"{levels} levels deep", f"more than the {MAX_JSON_DEPTH} levels",
                           "MAX_JSON_DEPTH")


def test_a_lone_surrogate_is_named_as_what_is_wrong_with_the_text(tmp_path: Path) -> None:
    bad = views_file(tmp_path / "views.jsonl", 1)
    with open(bad, "a", encoding="utf-8") as f:
        f.write('{"key": "user-1", "value": {"page": "/caf\\ud800", "ts": 1}}\n')
    code, _, err = cli(tmp_path, "load", APP, "page-views", str(bad))
    one_line_error(code, err, "load", "views.jsonl:2: not JSON (a lone UTF-16 surrogate \\ud800 "
                   "at byte 42", "Fix the producer")
    assert "truncated" not in err, err
