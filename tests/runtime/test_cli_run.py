"""`samza-dsl run`: the README's main command, inputs from files, and its errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")


def run_cli(*args: str, timeout: float = 120, cwd: str | os.PathLike[str] = ROOT
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


PAGE_VIEWS = os.path.join(ROOT, "examples", "page_view_counts.py") + ":app"
COUNTER = os.path.join(ROOT, "examples", "readwrite_counter.py") + ":app"


def _count(stdout: str, stream: str) -> int:
    line = next(ln for ln in stdout.splitlines() if ln.startswith(f"{stream}: "))
    return int(line.split()[1])


def test_the_main_job_runs_on_the_embedded_system_and_a_second_run_resumes(tmp_path) -> None:
    proc = run_cli("run", PAGE_VIEWS, "--sample", "3000", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _count(proc.stdout, "page-view-counts") > 0
    # the progress line: messages/s, in flight, checkpoint positions
    assert "msg/s" in proc.stderr and "in flight" in proc.stderr and "checkpoint" in proc.stderr
    # late messages of the event-time window: in the progress line and the summary
    assert "  late " in proc.stderr
    assert any(ln.startswith("late: ") and "page-view-counts-1-window-views-per-window" in ln
               or ln == "late: no late messages" for ln in proc.stdout.splitlines())
    job = tmp_path / ".samza" / "page-view-counts-1"
    assert (job / "logs" / "local" / "data.mdb").exists()
    assert (job / "stores").is_dir()

    again = run_cli("run", PAGE_VIEWS, "--sample", "3000", "-q", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert _count(again.stdout, "page-view-counts") == 0  # resumed: nothing reprocessed

    reset = run_cli("reset", PAGE_VIEWS, "--outputs", cwd=tmp_path)
    assert reset.returncode == 0, reset.stderr
    assert "checkpoint" in reset.stderr and "stores" in reset.stderr
    third = run_cli("run", PAGE_VIEWS, "-q", cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    assert _count(third.stdout, "page-view-counts") == _count(proc.stdout, "page-view-counts")


def test_load_and_dump_json_lines(tmp_path) -> None:
    data = tmp_path / "events.jsonl"
    events = [{"key": str(i % 3), "value": {"id": i % 3, "pad": "x"}} for i in range(30)]
    data.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    load = run_cli("load", COUNTER, "events", str(data), cwd=tmp_path)
    assert load.returncode == 0, load.stderr
    assert "loaded 30 message(s) into events" in load.stderr
    dumped = run_cli("dump", COUNTER, "events", cwd=tmp_path)
    assert dumped.returncode == 0, dumped.stderr
    assert sorted(dumped.stdout.splitlines()) == sorted(json.dumps(e, separators=(",", ":"))
                                                       for e in events)
    run = run_cli("run", COUNTER, "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    out = run_cli("dump", COUNTER, "counts", cwd=tmp_path)
    finals: dict[str, int] = {}
    for line in out.stdout.splitlines():
        rec = json.loads(line)
        finals[rec["key"]] = max(finals.get(rec["key"], 0), rec["value"])
    assert finals == {"0": 10, "1": 10, "2": 10}
    tail = run_cli("dump", COUNTER, "counts", "--limit", "2", cwd=tmp_path)
    assert len(tail.stdout.splitlines()) == 2


def test_load_names_an_unknown_stream(tmp_path) -> None:
    data = tmp_path / "e.jsonl"
    data.write_text("{}\n")
    proc = run_cli("load", COUNTER, "nope", str(data), cwd=tmp_path)
    assert proc.returncode == 2
    assert "'nope'" in proc.stderr and "events" in proc.stderr and "Traceback" not in proc.stderr


def test_inputs_from_json_lines_files(tmp_path) -> None:
    app_file = tmp_path / "upper.py"
    app_file.write_text(
        "from samza_dsl import StreamApplication, KV\n"
        "from samza_dsl.systems import MemorySystem\n"
        "from samza_dsl.serdes import KVSerde, StringSerde, JsonSerde\n"
        "app = StreamApplication('upper')\n"
        "mem = MemorySystem()\n"
        "words = app.input(mem.input('words', serde=KVSerde(StringSerde(), JsonSerde())))\n"
        "out = app.output(mem.output('shout'))\n"
        "words.map(lambda kv: KV(kv.key, kv.value['w'].upper())).send_to(out)\n")
    data = tmp_path / "words.jsonl"
    data.write_text("\n".join(json.dumps({"key": str(i), "value": {"w": w}})
                              for i, w in enumerate(["ab", "cd"])) + "\n")
    proc = run_cli("run", f"{app_file}:app", "--input", f"words={data}", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "shout: 2 message(s)" in proc.stdout
    assert "'AB'" in proc.stdout and "'CD'" in proc.stdout


def test_a_malformed_input_line_names_the_file_and_line(tmp_path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"key": "1", "value": 1}\nnot json\n')
    proc = run_cli("run", PAGE_VIEWS, "--input", f"page-views={data}", cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{data}:2" in proc.stderr and "Traceback" not in proc.stderr


def test_an_unknown_input_stream_is_named(tmp_path) -> None:
    proc = run_cli("run", PAGE_VIEWS, "--input", "nope=x.jsonl", cwd=tmp_path)
    assert proc.returncode == 2
    assert "'nope'" in proc.stderr and "page-views" in proc.stderr


def test_a_failing_user_function_stops_the_job_naming_operator_and_offset(tmp_path) -> None:
    app_file = tmp_path / "boom.py"
    app_file.write_text(
        "from samza_dsl import StreamApplication\n"
        "from samza_dsl.systems import MemorySystem\n"
        "app = StreamApplication('boom')\n"
        "mem = MemorySystem()\n"
        "def f(m):\n"
        "    if m == 3:\n"
        "        raise ValueError('three')\n"
        "    return m\n"
        "app.input(mem.input('n')).map(f, name='explode').send_to(app.output(mem.output('o')))\n"
        "def sample_input(n):\n"
        "    return list(range(n))\n")
    proc = run_cli("run", f"{app_file}:app", "--sample", "10", "-q")
    assert proc.returncode == 2
    assert "boom-1-map-explode" in proc.stderr and "offset 3" in proc.stderr
    assert "ValueError: three" in proc.stderr


def test_sigint_stops_a_following_job_cleanly_and_the_next_run_resumes(tmp_path: Path) -> None:
    # no timed commit: only the shutdown commits
    proc = _following_counter(tmp_path, 200, "-c", "task.commit.ms=600000")
    time.sleep(0.2)  # now it waits for more input
    out, _ = _interrupted(proc)
    assert _count(out, "counts") == 200
    # the clean shutdown committed: a second run finds nothing new
    again = run_cli("run", COUNTER, "-q", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert _count(again.stdout, "counts") == 0


BAD_RECORDS_APP = '''
from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

local = LocalSystem("local")
app = StreamApplication("bad-records")
serde = KVSerde(StringSerde(), JsonSerde())
app.input(local.input("in", serde=serde, partitions=1)).map(
    lambda kv: kv, name="same").send_to(app.output(local.output("out", serde=serde)))
'''


def _append_raw(tmp_path: Any, config: dict[str, str], records: list[tuple[bytes, bytes]]) -> None:
    """Records as bytes, as a producer that does not use the stream's serde writes them."""
    import importlib.util

    from runtime.local.system import LocalJob

    spec = importlib.util.spec_from_file_location("bad_records_app", tmp_path / "bad.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    job = LocalJob(module.app, config, run=False)
    try:
        job.log_of("local").append("in", 0, [(k, v, None) for k, v in records])
    finally:
        job.close()


@pytest.mark.parametrize("policy", ["skip", "dead-letter"])
def test_a_run_whose_new_records_were_all_bad_says_it_skipped_them(tmp_path, policy) -> None:
    (tmp_path / "bad.py").write_text(BAD_RECORDS_APP)
    job_dir = str(tmp_path / "job")
    config = {"job.dir": job_dir, "streams.in.samza.serde.error": policy}
    flags = [arg for key, value in config.items() for arg in ("-c", f"{key}={value}")]
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"key": f"k{i}", "value": i}) + "\n" for i in range(5)))
    first = run_cli("run", "bad.py:app", "-q", "--input", f"in={good}", *flags, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "in: 5 new message(s)" in first.stdout

    _append_raw(tmp_path, config, [(f"b{i}".encode(), b"{not json") for i in range(31)])
    proc = run_cli("run", "bad.py:app", "-q", *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "nothing new" not in proc.stdout, proc.stdout
    assert "in: 0 new message(s) (0 from in); 31 more new record(s) read and skipped" \
        in proc.stdout, proc.stdout
    line = next(ln for ln in proc.stdout.splitlines()
                if ln.startswith("skipped: 31 record(s) of in that did not deserialize"))
    assert f"streams.in.samza.serde.error={policy}" in line
    if policy == "dead-letter":
        assert "`samza-dsl dump bad.py:app bad-records-1-dead-letter`" in line
        dumped = run_cli("dump", "bad.py:app", "bad-records-1-dead-letter", *flags, cwd=tmp_path)
        assert dumped.returncode == 0 and len(dumped.stdout.splitlines()) == 31, dumped.stderr
    else:
        assert "each is logged above with its partition, offset and error" in line
        assert proc.stderr.count("skipped (streams.in.samza.serde.error=skip)") == 31

    # the next run read nothing: that is "nothing new" again
    after = run_cli("run", "bad.py:app", "-q", *flags, cwd=tmp_path)
    assert "nothing new" in after.stdout and "skipped" not in after.stdout, after.stdout


def test_a_run_whose_only_new_record_was_skipped_by_request_says_so(tmp_path) -> None:
    (tmp_path / "bad.py").write_text(BAD_RECORDS_APP)
    flags = ["-c", f"job.dir={tmp_path / 'job'}"]
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"key": "k", "value": 1}) + "\n")
    assert run_cli("run", "bad.py:app", "-q", "--input", f"in={good}", *flags,
                   cwd=tmp_path).returncode == 0
    assert run_cli("load", "bad.py:app", "in", str(good), *flags, cwd=tmp_path).returncode == 0
    proc = run_cli("run", "bad.py:app", "-q", "--skip", "in:0:1", *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "nothing new" not in proc.stdout, proc.stdout
    assert "1 more new record(s) read and skipped" in proc.stdout
    assert "skipped: 1 record(s) as --skip asked" in proc.stdout


@pytest.mark.parametrize("containers", [1, 2])
def test_a_follow_run_prints_its_threads_stacks_on_sigusr1_and_goes_on(
        tmp_path: Path, containers: int) -> None:
    """``kill -USR1`` on a run that waits for input: every thread's stack on stderr (the
    container's loop among them), and the run goes on to a clean stop that commits. A run of
    several containers forks one process each, and each answers the signal itself."""
    proc = _following_counter(tmp_path, 50, "--containers", str(containers))
    pids = [proc.pid] if containers == 1 else _children(proc.pid)
    assert len(pids) == containers, pids
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
    time.sleep(0.5)
    went_on = proc.poll() is None
    out, err = _interrupted(proc)
    assert went_on, "the run stopped on SIGUSR1"
    assert "Current thread" in err or "Thread 0x" in err, err
    assert "runtime/engine/container.py" in err.replace("\\", "/"), err
    # and the event loop's tasks, each with where it waits
    assert "asyncio: " in err and "task(s) of the event loop" in err, err
    assert err.count("- consumer:\n") == containers, err
    assert _count(out, "counts") == 50


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux's /proc)."""
    found: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def _following_counter(tmp_path: Path, n: int, *args: str) -> subprocess.Popen[str]:
    """``samza-dsl run --follow`` of the counter example over ``n`` loaded events, once it has
    written their counts (it then waits for more input)."""
    from runtime.local.log import LocalLog

    data = tmp_path / "events.jsonl"
    data.write_text("\n".join(json.dumps({"key": str(i % 5), "value": {"id": i % 5}})
                              for i in range(n)) + "\n")
    assert run_cli("load", COUNTER, "events", str(data), cwd=tmp_path).returncode == 0
    proc = subprocess.Popen([CLI, "run", COUNTER, "--follow", "-q", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        with LocalLog(tmp_path / ".samza" / "readwrite-counter-1" / "logs" / "local") as log:
            while sum(log.end_offset("counts", p) for p in range(4)) < n:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the job did not process its input"
                time.sleep(0.05)
    except BaseException:
        proc.kill()
        raise
    return proc


def _interrupted(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Ctrl-C to a following run: what it wrote (stdout, stderr), once it exited 0."""
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    return out, err


#: the examples with sample input on the embedded system (remote_profiles reads a service the
#: test would have to start, and tests/runtime/test_remote_table.py runs it so)
CLEAN_EXAMPLES = ["currency_conversion", "page_view_counts", "profile_enrichment",
                  "readwrite_counter", "reprocess_page_views", "sliding_averages", "trending_tags"]


@pytest.mark.parametrize("example", CLEAN_EXAMPLES)
def test_a_shipped_example_runs_clean(example: str, tmp_path: Path) -> None:
    """A shipped example prints what it loaded, its progress and its summary: no warning about
    its own plan, no line a user would have to look up."""
    app = os.path.join(ROOT, "examples", f"{example}.py") + ":app"
    proc = run_cli("run", app, "--sample", "200", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    others = [ln for ln in proc.stderr.splitlines()
              if not ln.startswith(("loaded ", "processed "))]
    assert others == [], f"{example} printed more than its progress:\n" + "\n".join(others)
