"""A bad record after a ``partition_by`` is one command to get past (docs/operations.md, "A bad
record"), at least once, on the embedded local system (and on Kafka:
``tests/kafka/test_kafka_bad_record_after_hop.py``).

The function after the hop fails on one trip: the error names the record as ``samza-dsl dump
--offsets`` shows it (the intermediate stream, partition and offset) and the input message it
was written for, and the ``--skip`` command it prints, run as printed, finishes the job: the
bad record is skipped once, wherever it now lives (the step before the hop, which had no
checkpoint past the bad trip, writes it again at another offset as it replays), and every
other trip is applied once (each driver's fares in the table are exactly the good ones)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runtime.local.system import LocalJob
from runtime.ops.loader import load_app
from tests.runtime.badhop_app import BAD, T0

APP_FILE = Path(__file__).resolve().parent / "badhop_app.py"
APP = f"{APP_FILE}:app"
TRIPS = 400
CLI = [sys.executable, "-m", "runtime.ops.cli"]


def _cli(cwd: Path, env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "COLUMNS": "200", **env})


def _input_checkpoints(cwd: Path) -> dict[int, int]:
    job = LocalJob(load_app(APP), {"job.dir": str(cwd / ".samza" / "fares-1")}, run=False)
    try:
        return {ssp.partition: o for cp in job.checkpoints.tasks().values()
                for ssp, o in cp.items() if ssp.stream_id == "trips"}
    finally:
        job.close()


def skip_after_the_hop(cwd: Path, env: Mapping[str, str], job: str,
                       failed_run: Callable[[], None] | None = None) -> None:
    """Fail on the bad trip, rerun with the command the error prints, and check the result
    (``job``: the job's name and id, which the intermediate stream's name starts with;
    ``failed_run``: checks what the failed run left, before the rerun)."""
    inter = f"{job}-partition_by-by-driver"
    failed = _cli(cwd, env, "run", APP, "--sample", str(TRIPS), "-q", "--show", "0",
                  "-c", "task.commit.ms=600000", "-c", "user.trips.sleep.ms=5")
    assert failed.returncode == 2, failed.stderr
    line = failed.stderr.strip().splitlines()[-1]
    got = re.search(rf"operator '{job}-map-fares' failed in task '[^']+' on stream '{inter}' "
                    rf"partition (\d+) offset (\d+) \(written for the message at stream 'trips' "
                    rf"partition 0 offset {BAD // 2}\): KeyError: 'fare' in Fares.__call__\(\) "
                    rf"at \S*badhop_app.py:\d+\.", line)
    assert got is not None, line
    part, offset = int(got[1]), int(got[2])
    # the record, as dump --offsets shows it
    dump = _cli(cwd, env, "dump", APP, inter, "--offsets")
    assert dump.returncode == 0, dump.stderr
    shown = [json.loads(x) for x in dump.stdout.splitlines()]
    assert {"partition": part, "offset": offset,
            "message": {"key": f"d{BAD % 7}", "value": {"driver": f"d{BAD % 7}", "t": T0 + 30 * BAD}}} in shown
    if failed_run is not None:
        failed_run()
    command = re.search(r"\(`(samza-dsl run [^`]+)` passes over it once, and so the copies of "
                        r"it that a replay writes again\)", line)
    assert command is not None, line
    words = shlex.split(command[1])
    assert words[-2:] == ["--skip", f"{inter}:{part}:{offset}"], words
    rerun = _cli(cwd, env, *words[1:], "--show", "0")
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stderr.count("as --skip asked") == 1, rerun.stderr
    assert "skipped: 1 record(s) as --skip asked" in rerun.stdout, rerun.stdout
    # the step before the hop replayed the bad trip's partition: its records came again
    replays = re.search(r"skipped: (\d+) record\(s\) of intermediate streams", rerun.stdout)
    assert replays is not None and int(replays[1]) >= TRIPS // 2 - BAD // 2, rerun.stdout
    out = _cli(cwd, env, "dump", APP, "totals")
    assert out.returncode == 0, out.stderr
    fares: dict[str, list[int]] = {}
    for ln in out.stdout.splitlines():  # each driver's last output: its fares in the table
        m = json.loads(ln)
        fares[m["key"]] = m["value"]
    want: dict[str, list[Any]] = {f"d{d}": [] for d in range(7)}
    for i in range(TRIPS):
        if i != BAD:
            want[f"d{i % 7}"].append(i)
    assert {k: sorted(v) for k, v in fares.items()} == want  # each good trip applied once


def test_the_printed_skip_gets_past_a_record_that_fails_after_the_hop(tmp_path: Path) -> None:
    def no_checkpoint_past_the_bad_trip() -> None:
        # so the rerun writes the bad trip into the intermediate stream again, and skips that
        # copy too (else the function fails on it again)
        assert _input_checkpoints(tmp_path).get(0, -1) < BAD // 2

    skip_after_the_hop(tmp_path, {}, "fares-1", no_checkpoint_past_the_bad_trip)


def test_skip_names_the_streams_it_takes(tmp_path: Path) -> None:
    inter = "fares-1-partition_by-by-driver"
    bad = _cli(tmp_path, {}, "run", APP, "--skip", "fares-1-partition_by-by-drivr:0:3")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        "samza-dsl run: error: --skip fares-1-partition_by-by-drivr:0:3: "
        "'fares-1-partition_by-by-drivr' is not an input nor an intermediate stream (did you "
        f"mean '{inter}'?); inputs: trips; intermediate streams: {inter}")


PICKY = f"{APP_FILE}:picky"
PICKY_INTER = "picky-1-partition_by-by-driver"


def _good_fares() -> dict[str, list[int]]:
    want: dict[str, list[int]] = {f"d{d}": [] for d in range(7)}
    for i in range(TRIPS):
        if i != BAD:
            want[f"d{i % 7}"].append(i)
    return want


def _fares(cwd: Path, app: str, env: Mapping[str, str] | None = None) -> dict[str, list[int]]:
    """Each driver's fares as the table ends: its last output."""
    out = _cli(cwd, env or {}, "dump", app, "totals")
    assert out.returncode == 0, out.stderr
    fares: dict[str, list[int]] = {}
    for ln in out.stdout.splitlines():
        m = json.loads(ln)
        fares[m["key"]] = m["value"]
    return {k: sorted(v) for k, v in fares.items()}


def _picky_fails(cwd: Path, env: Mapping[str, str] | None = None) -> str:
    """A first run under the ``fail`` policy, which stops on the bad trip while the step before
    the hop has no checkpoint past it: the next run writes it into the hop again. Its error."""
    failed = _cli(cwd, env or {}, "run", PICKY, "--sample", str(TRIPS), "-q", "--show", "0",
                  "-c", "task.commit.ms=600000", "-c", "user.trips.sleep.ms=5")
    assert failed.returncode == 2, failed.stderr
    assert "Traceback" not in failed.stderr, failed.stderr
    return failed.stderr.strip().splitlines()[-1]


def dead_letters_once(cwd: Path, env: Mapping[str, str], job: str) -> None:
    """After a failed run, a run under ``dead-letter`` writes the bad record to the dead-letter
    stream once, with its origin, and applies every other trip once (``job``: the job's name
    and id)."""
    inter = f"{job}-partition_by-by-driver"
    _picky_fails(cwd, env)
    run = _cli(cwd, env, "run", PICKY, "-q", "--show", "0",
               "-c", f"streams.{inter}.samza.serde.error=dead-letter")
    assert run.returncode == 0, run.stderr
    replays = re.search(r"skipped: (\d+) record\(s\) of intermediate streams", run.stdout)
    assert replays is not None and int(replays[1]) >= TRIPS // 2 - BAD // 2, run.stdout
    dead = _cli(cwd, env, "dump", PICKY, f"{job}-dead-letter")
    assert dead.returncode == 0, dead.stderr
    letters = [json.loads(x) for x in dead.stdout.splitlines()]
    assert len(letters) == 1, letters  # once: the copy the replay wrote is skipped as a replay
    assert letters[0]["source"].startswith(f"{inter}/")
    assert letters[0]["origin"] == f"trips/0/{BAD // 2}"  # the input message it was written for
    assert "a trip without a fare (a record written for the message at stream 'trips' " \
           f"partition 0 offset {BAD // 2})" in letters[0]["error"]
    assert _fares(cwd, PICKY, env) == _good_fares()


def test_a_record_after_the_hop_that_does_not_decode_is_dead_lettered_once_with_its_origin(
        tmp_path: Path) -> None:
    dead_letters_once(tmp_path, {}, "picky-1")


def test_a_record_after_the_hop_that_does_not_decode_is_skipped_once_naming_its_origin(
        tmp_path: Path) -> None:
    _picky_fails(tmp_path)
    run = _cli(tmp_path, {}, "run", PICKY, "-q", "--show", "0",
               "-c", f"streams.{PICKY_INTER}.samza.serde.error=skip")
    assert run.returncode == 0, run.stderr
    warned = [ln for ln in run.stderr.splitlines() if "a trip without a fare" in ln]
    assert len(warned) == 1 and "(a record written for the message at stream 'trips' " \
        f"partition 0 offset {BAD // 2})" in warned[0] and "skipped" in warned[0], run.stderr
    assert _fares(tmp_path, PICKY) == _good_fares()
    # a --skip of an intermediate stream is checked against it as an input's is
    wrong = _cli(tmp_path, {}, "run", PICKY, "-q", "--skip", f"{PICKY_INTER}:9:1")
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines()[-1].startswith(
        f"samza-dsl run: error: --skip {PICKY_INTER}:9:1: intermediate stream "
        f"'{PICKY_INTER}' has 2 partition(s), 0 to 1; "), wrong.stderr
    ahead = _cli(tmp_path, {}, "run", PICKY, "-q", "--skip", f"{PICKY_INTER}:1:100000")
    assert ahead.returncode == 0, ahead.stderr
    assert f"--skip {PICKY_INTER}:1:100000 not applied yet: partition 1 of intermediate stream " \
           f"{PICKY_INTER} ends at offset " in ahead.stderr, ahead.stderr


def test_a_record_after_the_hop_that_does_not_decode_fails_with_a_skip_that_works(
        tmp_path: Path) -> None:
    line = _picky_fails(tmp_path)
    assert re.search(r"^samza-dsl run: error: ValueError: a trip without a fare \(a record "
                     rf"written for the message at stream 'trips' partition 0 offset "
                     rf"{BAD // 2}\)\. The job stopped before this message", line), line
    assert f"(at stream '{PICKY_INTER}', partition " in line
    command = re.search(r"\(`(samza-dsl run [^`]+)`, which passes over the copies of it that a "
                        r"replay writes again too\)", line)
    assert command is not None, line
    words = shlex.split(command[1])
    assert words[-2] == "--skip" and words[-1].startswith(f"{PICKY_INTER}:"), words
    rerun = _cli(tmp_path, {}, *words[1:], "--show", "0")
    assert rerun.returncode == 0, rerun.stderr
    assert "skipped: 1 record(s) as --skip asked" in rerun.stdout, rerun.stdout
    assert _fares(tmp_path, PICKY) == _good_fares()


def test_exactly_once_the_printed_skip_gets_past_the_record_at_its_one_offset(
        tmp_path: Path) -> None:
    eos = ("-c", "job.processing.guarantee=exactly-once")
    failed = _cli(tmp_path, {}, "run", APP, "--sample", str(TRIPS), "-q", "--show", "0", *eos)
    assert failed.returncode == 2, failed.stderr
    line = failed.stderr.strip().splitlines()[-1]
    assert "on stream 'fares-1-partition_by-by-driver' partition " in line, line
    command = re.search(r"\(`(samza-dsl run [^`]+)` passes over it once\)", line)
    assert command is not None, line
    rerun = _cli(tmp_path, {}, *shlex.split(command[1])[1:], "--show", "0", *eos)
    assert rerun.returncode == 0, rerun.stderr
    assert "skipped: 1 record(s) as --skip asked" in rerun.stdout, rerun.stdout
    assert _fares(tmp_path, APP) == _good_fares()


SESSIONS = f"{APP_FILE}:sessions"
SESSIONS_INTER = "sessions-1-partition_by-by-driver"


def test_a_fold_failing_on_a_trip_a_session_window_held_names_that_trip(
        tmp_path: Path) -> None:
    failed = _cli(tmp_path, {}, "run", SESSIONS, "--sample", str(TRIPS), "-q", "--show", "0",
                  "-c", "task.commit.ms=600000")
    assert failed.returncode == 2, failed.stderr
    line = failed.stderr.strip().splitlines()[-1]
    # the held trip, not the message the task had in hand when the watermark passed it
    got = re.search(rf"operator 'sessions-1-window-sessions' failed .*on the message it held "
                    rf"from stream '{SESSIONS_INTER}' partition (\d+) offset (\d+)", line)
    assert got is not None, line
    part, offset = int(got[1]), int(got[2])
    dump = _cli(tmp_path, {}, "dump", SESSIONS, SESSIONS_INTER, "--offsets")
    shown = {(m["partition"], m["offset"]): m["message"]
             for m in map(json.loads, dump.stdout.splitlines())}
    assert shown[(part, offset)] == {"key": f"d{BAD % 7}",
                                     "value": {"driver": f"d{BAD % 7}", "t": T0 + 30 * BAD}}
    assert "KeyError: 'fare'" in line
    command = re.search(r"`(samza-dsl run [^`]+ --skip [^`]+)`", line)
    assert command is not None, line
    words = shlex.split(command[1])
    assert words[-1] == f"{SESSIONS_INTER}:{part}:{offset}", words
    rerun = _cli(tmp_path, {}, *words[1:], "--show", "0")
    assert rerun.returncode == 0, rerun.stderr
    assert "skipped: 1 record(s) as --skip asked" in rerun.stdout, rerun.stdout
    totals = {k: max(v) for k, v in _totals(tmp_path).items()}
    assert totals == {d: sum(v) for d, v in _good_fares().items()}


def _totals(cwd: Path) -> dict[str, list[int]]:
    out = _cli(cwd, {}, "dump", SESSIONS, "totals")
    assert out.returncode == 0, out.stderr
    got: dict[str, list[int]] = {}
    for ln in out.stdout.splitlines():
        m = json.loads(ln)
        got.setdefault(m["key"], []).append(m["value"])
    return got
