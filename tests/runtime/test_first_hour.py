"""A new user's first hour with ``samza-dsl run``, through the real console script: a resumed run
says so, and input options never silently do nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "samza-dsl")
VIEWS = str(ROOT / "examples" / "reprocess_page_views.py") + ":app"
COUNTER = str(ROOT / "examples" / "readwrite_counter.py") + ":app"


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "100"})


def ok(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = cli(*args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc


def count(stdout: str, stream: str) -> int:
    line = next(ln for ln in stdout.splitlines() if ln.startswith(f"{stream}: "))
    return int(line.split()[1])


# -- 4. a resumed run says so ----------------------------------------------------------------------

def test_a_resumed_run_names_its_checkpoint_and_what_was_new(tmp_path: Path) -> None:
    first = ok("run", VIEWS, "--sample", "500", "-q", cwd=tmp_path)
    assert "resumed" not in first.stdout
    assert "in: 500 new message(s) (500 from page-views)" in first.stdout

    again = ok("run", VIEWS, "-q", cwd=tmp_path)
    lines = again.stdout.splitlines()
    resumed = next(ln for ln in lines if ln.startswith("resumed after the checkpoint"))
    for p in range(4):  # the offset of each input partition it resumed after
        assert f"page-views[{p}]@" in resumed
    assert "in: 0 new message(s)" in again.stdout
    hint = next(ln for ln in lines if ln.startswith("nothing new"))
    assert f"samza-dsl dump {VIEWS} page-views" in hint and f"samza-dsl reset {VIEWS}" in hint

    # new messages: counted as new, after the same kind of line
    (tmp_path / "more.jsonl").write_text(ok("sample", VIEWS, "page-views", "30", cwd=tmp_path)
                                         .stdout)
    ok("load", VIEWS, "page-views", "more.jsonl", cwd=tmp_path)
    third = ok("run", VIEWS, "-q", cwd=tmp_path)
    assert "resumed after the checkpoint" in third.stdout
    assert "in: 30 new message(s) (30 from page-views)" in third.stdout
    assert "nothing new" not in third.stdout


def test_a_run_of_several_containers_sums_up_as_one_and_says_when_it_resumed(
        tmp_path: Path) -> None:
    first = ok("run", VIEWS, "--sample", "500", "-q", "--containers", "2", cwd=tmp_path)
    lines = first.stdout.splitlines()
    assert "resumed" not in first.stdout
    # the totals of both containers, as a run of one container gives them
    assert "in: 500 new message(s) (500 from page-views)" in lines, first.stdout
    through = next(ln for ln in lines if ln.startswith("through: "))
    out = next(ln for ln in lines if ln.startswith("out: "))
    assert int(out.split()[1].replace(",", "")) == count(first.stdout, "country-counts") > 0
    assert "late: no late messages" in lines
    (tmp_path / "one").mkdir()
    single = ok("run", VIEWS, "--sample", "500", "-q", cwd=tmp_path / "one").stdout.splitlines()
    assert through in single and out in single

    again = ok("run", VIEWS, "-q", "--containers", "2", cwd=tmp_path)
    lines = again.stdout.splitlines()
    resumed = next(ln for ln in lines if ln.startswith("resumed after the checkpoint"))
    for p in range(4):  # both containers' input partitions
        assert f"page-views[{p}]@" in resumed
    assert "in: 0 new message(s) (0 from page-views)" in lines
    hint = next(ln for ln in lines if ln.startswith("nothing new"))
    assert f"samza-dsl dump {VIEWS} page-views" in hint and f"samza-dsl reset {VIEWS}" in hint
    assert not any(ln.startswith("container ") for ln in again.stderr.splitlines())


def test_the_progress_line_counts_user_messages_not_control_records(tmp_path: Path) -> None:
    data = tmp_path / "events.jsonl"
    data.write_text("".join(json.dumps({"key": str(i % 3), "value": {"id": i % 3}}) + "\n"
                            for i in range(40)))
    proc = ok("run", COUNTER, "--input", f"events={data}", cwd=tmp_path)
    final = proc.stderr.strip().splitlines()[-1]
    # 40 messages; the end-of-stream and watermark records are no messages
    assert final.split()[:2] == ["processed", "40"], final


# -- 3. input options never silently do nothing -----------------------------------------------------

def test_input_on_a_stream_that_holds_data_needs_append_or_replace(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(ok("sample", VIEWS, "page-views", "300", cwd=tmp_path).stdout)
    (tmp_path / "b.jsonl").write_text(ok("sample", VIEWS, "page-views", "120", cwd=tmp_path).stdout)
    first = ok("run", VIEWS, "--input", "page-views=a.jsonl", "-q", cwd=tmp_path)
    assert "in: 300 new message(s)" in first.stdout

    refused = cli("run", VIEWS, "--input", "page-views=b.jsonl", "-q", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "'page-views'" in refused.stderr and "already holds 300 message(s)" in refused.stderr
    assert "--append" in refused.stderr and "--replace" in refused.stderr
    assert "Traceback" not in refused.stderr
    held = ok("dump", VIEWS, "page-views", cwd=tmp_path).stdout.splitlines()
    assert len(held) == 300  # nothing was loaded

    appended = ok("run", VIEWS, "--input", "page-views=b.jsonl", "--append", "-q", cwd=tmp_path)
    assert "in: 120 new message(s)" in appended.stdout
    assert len(ok("dump", VIEWS, "page-views", cwd=tmp_path).stdout.splitlines()) == 420

    # --replace: the input holds just the new file and the job starts over on it
    replaced = ok("run", VIEWS, "--input", "page-views=b.jsonl", "--replace", "-q", cwd=tmp_path)
    assert "starts over" in replaced.stderr
    assert "resumed" not in replaced.stdout and "in: 120 new message(s)" in replaced.stdout
    assert len(ok("dump", VIEWS, "page-views", cwd=tmp_path).stdout.splitlines()) == 120
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    alone = ok("run", VIEWS, "--input", f"page-views={tmp_path / 'b.jsonl'}", "-q", "--show",
               "100", cwd=fresh)
    shown = sorted(ln for ln in replaced.stdout.splitlines() if ln.startswith("  KV("))
    assert shown and shown == sorted(ln for ln in alone.stdout.splitlines()
                                     if ln.startswith("  KV("))


def test_the_same_sample_again_is_said_and_another_is_an_error(tmp_path: Path) -> None:
    ok("run", VIEWS, "--sample", "200", "-q", cwd=tmp_path)
    again = ok("run", VIEWS, "--sample", "200", "-q", cwd=tmp_path)
    assert "already holds the sample of 200" in again.stderr and "not loaded again" in again.stderr
    other = cli("run", VIEWS, "--sample", "50", "-q", cwd=tmp_path)
    assert other.returncode == 2 and "--sample: input 'page-views'" in other.stderr
    more = ok("run", VIEWS, "--sample", "50", "--append", "-q", cwd=tmp_path)
    assert "in: 50 new message(s)" in more.stdout
    # the stream no longer holds just the sample: the same sample again is refused
    assert cli("run", VIEWS, "--sample", "200", "-q", cwd=tmp_path).returncode == 2


def test_a_poison_record_is_skipped_once_from_the_command_line(tmp_path: Path) -> None:
    rows = ok("sample", VIEWS, "page-views", "100", cwd=tmp_path).stdout.splitlines()
    rows[49] = json.dumps({"ts": 1700000041.0, "bot": False})  # no country: the job fails on it
    (tmp_path / "v.jsonl").write_text("\n".join(rows) + "\n")
    failed = cli("run", VIEWS, "--input", "page-views=v.jsonl", "-q", cwd=tmp_path)
    assert failed.returncode == 2 and "KeyError: 'country'" in failed.stderr, failed.stderr
    hint = failed.stderr.split("--skip ")[1].split("`")[0]  # the error says how to skip it
    stream, partition, offset = hint.split(":")
    assert stream == "page-views"
    # the checkpoint stays before it: a plain rerun fails again on the same record
    assert cli("run", VIEWS, "-q", cwd=tmp_path).returncode == 2

    skipped = ok("run", VIEWS, "--skip", hint, "-q", "--show", "0", cwd=tmp_path)
    assert f"skipped page-views partition {partition} offset {offset}" in skipped.stderr
    assert "skipped: 1 record(s) as --skip asked" in skipped.stdout
    # every other message is read (the failed run committed none of them) and none is lost;
    # what the failed run had written to the intermediate stream is there again (at-least-once)
    assert "in: 99 new message(s)" in skipped.stdout
    dumped = [json.loads(ln) for ln in
              ok("dump", VIEWS, "country-counts", cwd=tmp_path).stdout.splitlines()]
    humans = sum(1 for r in rows if not json.loads(r).get("bot")) - 1
    assert sum(d["value"]["views"] for d in dumped) >= humans
    # once: the next run has nothing to skip and nothing new
    after = ok("run", VIEWS, "-q", cwd=tmp_path)
    assert "nothing new" in after.stdout and "skipped:" not in after.stdout

    bad = cli("run", VIEWS, "--skip", "page-views:x:1", "-q", cwd=tmp_path)
    assert bad.returncode == 2 and "STREAM:PARTITION:OFFSET" in bad.stderr
    unknown = cli("run", VIEWS, "--skip", "views:0:1", "-q", cwd=tmp_path)
    assert unknown.returncode == 2 and "inputs: page-views" in unknown.stderr


UNDECLARED_APP = '''
from samza_dsl import StreamApplication
from samza_dsl.systems import LocalSystem

local = LocalSystem("local")
app = StreamApplication("undeclared")
app.input(local.input("words")).map(str.upper).send_to(app.output(local.output("upper")))


def sample_input(n):
    return {"words": [f"w{i}" for i in range(n)]}
'''


def test_a_skip_that_matches_nothing_is_an_error_or_a_warning(tmp_path: Path) -> None:
    # a partition the input does not have: an error before anything is loaded or run
    bad = cli("run", COUNTER, "--sample", "200", "-q", "--skip", "events:9:1", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "samza-dsl run: error: --skip events:9:1: input 'events' has 4 partition(s), 0 to 3; "
        "give the partition and offset of the record as `samza-dsl dump APP events --offsets` "
        "prints them, or as the job's error named them"]
    assert list(tmp_path.iterdir()) == []

    first = ok("run", COUNTER, "--sample", "200", "-q", "--show", "0", cwd=tmp_path)
    assert "in: 200 new message(s)" in first.stdout
    end = max(json.loads(ln)["offset"] for ln in ok("dump", COUNTER, "events", "--offsets",
                                                     cwd=tmp_path).stdout.splitlines()
              if json.loads(ln)["partition"] == 1)
    for containers in ([], ["--containers", "2"]):
        # already processed: the checkpoint is past it
        behind = ok("run", COUNTER, "-q", "--show", "0", "--skip", "events:1:0", *containers,
                    cwd=tmp_path)
        warned = [ln for ln in behind.stderr.splitlines() if ln.startswith("--skip ")]
        assert warned == [f"--skip events:1:0 not applied: an earlier run processed it (the "
                          f"checkpoint of events[1] is at offset {end}, the last one processed); "
                          f"this run starts after it"], behind.stderr
        assert "skipped:" not in behind.stdout
        # past the end of the partition: this run does not get there
        past = ok("run", COUNTER, "-q", "--show", "0", "--skip", f"events:1:{end + 5}",
                  *containers, cwd=tmp_path)
        warned = [ln for ln in past.stderr.splitlines() if ln.startswith("--skip ")]
        assert warned == [f"--skip events:1:{end + 5} not applied: partition 1 of events ends "
                          f"at offset {end}, where this run stops reading; see its records with "
                          f"`samza-dsl dump APP events --offsets`"], past.stderr
        wrong = cli("run", COUNTER, "-q", "--skip", "events:4:0", *containers, cwd=tmp_path)
        assert wrong.returncode == 2 and "has 4 partition(s)" in wrong.stderr, wrong.stderr

    # a partition count the job infers (none declared) is checked once the job is planned
    (tmp_path / "undeclared.py").write_text(UNDECLARED_APP)
    bad = cli("run", "undeclared.py:app", "--sample", "5", "-q", "--skip", "words:1:0",
              cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert "input 'words' has 1 partition(s), 0 to 0" in bad.stderr
    # the job was let go of: the next run is not refused by its lock
    assert "upper: 5 message(s)" in ok("run", "undeclared.py:app", "-q", cwd=tmp_path).stdout


# -- 2. reprocess: an output directory that cannot be made is an error before Spark starts --------

def test_an_output_directory_that_cannot_be_made_is_found_before_spark_starts(
        tmp_path: Path) -> None:
    import time

    (tmp_path / "views.jsonl").write_text(ok("sample", VIEWS, "page-views", "10", cwd=tmp_path)
                                          .stdout)
    (tmp_path / "taken").write_text("a file, not a directory\n")
    started = time.monotonic()
    proc = cli("reprocess", VIEWS, "--input", "page-views=views.jsonl", "--output",
               "country-counts=taken/out/counts.jsonl", cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    assert "--output country-counts: cannot make the directory" in proc.stderr
    assert "taken" in proc.stderr and "Traceback" not in proc.stderr
    assert elapsed < 8, elapsed  # Spark's start alone takes longer (noisy timing, 2 cores)


LATE_APP = '''
from datetime import timedelta
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

local = LocalSystem("local")
app = StreamApplication("late-demo")
serde = KVSerde(StringSerde(), JsonSerde())
clicks = app.input(local.input("clicks", serde=serde, partitions=1,
                               event_time=lambda kv: kv.value["ts"]))
counts = app.output(local.output("counts", serde=serde, partitions=1))
(clicks.window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=lambda: 0,
                                      fold=lambda kv, n: n + 1,
                                      event_time=lambda kv: kv.value["ts"]), name="per-key")
 .map(lambda pane: KV(pane.key.key, pane.message)).send_to(counts))


def sample_input(n):
    # in order, but every tenth click comes a minute after its time: late once the watermark
    # has moved past its window (it moves with each message)
    return {"clicks": [KV("k", {"ts": 1000.0 + i - (60 if i % 10 == 9 else 0)})
                       for i in range(n)]}
'''


def test_the_summary_says_how_many_were_late_where_they_went_and_why(tmp_path: Path) -> None:
    (tmp_path / "late_app.py").write_text(LATE_APP)
    proc = ok("run", "late_app.py:app", "--sample", "10000", "-q", "--show", "0", cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert "in: 10,000 new message(s) (10,000 from clicks)" in lines
    late = next(ln for ln in lines if ln.startswith("late: ") and "dropped by window" in ln)
    n = int(late.split()[1].replace(",", ""))
    assert n > 0 and "from clicks" in late
    why = next(ln for ln in lines if ln.startswith("late: a message is late when"))
    assert "watermark" in why and "max_out_of_orderness" in why and "late_to" in why
    out = sum(json.loads(ln)["value"] for ln in
              ok("dump", "late_app.py:app", "counts", cwd=tmp_path).stdout.splitlines())
    assert out + n == 10000  # every click is in a pane or counted late


MEMORY_APP = '''
from samza_dsl import StreamApplication
from samza_dsl.systems import SystemDescriptor

mem = SystemDescriptor("mem", "memory")
app = StreamApplication("in-memory")
app.input(mem.input("words")).map(str.upper).send_to(app.output(mem.output("upper")))


def sample_input(n):
    return {"words": [f"w{i}" for i in range(n)]}
'''


def test_append_or_replace_on_a_job_in_memory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "mem_app.py").write_text(MEMORY_APP)
    fine = ok("run", "mem_app.py:app", "--sample", "3", "-q", cwd=tmp_path)
    assert "upper: 3 message(s)" in fine.stdout
    for flag in ("--append", "--replace"):
        proc = cli("run", "mem_app.py:app", "--sample", "3", flag, "-q", cwd=tmp_path)
        assert proc.returncode == 2 and f"{flag}: 'in-memory' runs in memory" in proc.stderr
    lone = cli("run", "mem_app.py:app", "--append", "-q", cwd=tmp_path)
    assert lone.returncode == 2 and "give one of them" in lone.stderr
