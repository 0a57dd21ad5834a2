"""`samza-dsl dump`: every stream of a job (dead letters and changelogs too), streamed, and a
`--limit` that reads only the tail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.engine.dump import dump_lines
from runtime.local.job_system import dump_sources
from runtime.local.log import LocalLog
from runtime.local.system import LocalJob

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
COUNTER = os.path.join(ROOT, "examples", "readwrite_counter.py") + ":app"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _log(cwd: Path) -> LocalLog:
    return LocalLog(cwd / ".samza" / "readwrite-counter-1" / "logs" / "local")


def _jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"key": str(i % 4), "value": {"id": i % 4, "pad": "x"}})
                            + "\n" for i in range(n)))
    return path


def test_dead_letters_and_changelogs_are_streams_of_the_job(tmp_path: Path) -> None:
    assert run_cli("load", COUNTER, "events", str(_jsonl(tmp_path / "e.jsonl", 12)),
                   cwd=tmp_path).returncode == 0
    with _log(tmp_path) as log:  # a record the input's JSON serde cannot read, at offset 3
        log.append("events", 0, [(b"0", b"{not json", None)])
    run = run_cli("run", COUNTER, "-q", "-c", "streams.events.samza.serde.error=dead-letter",
                  cwd=tmp_path)
    assert run.returncode == 0, run.stderr

    dead = run_cli("dump", COUNTER, "readwrite-counter-1-dead-letter", cwd=tmp_path)
    assert dead.returncode == 0, dead.stderr
    (letter,) = [json.loads(line) for line in dead.stdout.splitlines()]
    assert letter["key"] == "0" and letter["value"] == "{not json"
    assert letter["source"].startswith("events/0/") and "decode" in letter["error"]

    changelog = run_cli("dump", COUNTER, "readwrite-counter-1-counts-changelog", cwd=tmp_path)
    assert changelog.returncode == 0, changelog.stderr
    finals: dict[str, int] = {}
    for line in changelog.stdout.splitlines():
        entry = json.loads(line)
        finals[entry["key"]] = entry["value"]
    assert finals == {"0": 3, "1": 3, "2": 3, "3": 3}


def test_an_unknown_stream_lists_every_stream(tmp_path: Path) -> None:
    assert run_cli("load", COUNTER, "events", str(_jsonl(tmp_path / "e.jsonl", 2)),
                   cwd=tmp_path).returncode == 0
    proc = run_cli("dump", COUNTER, "nope", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    for name in ("events", "counts", "readwrite-counter-1-dead-letter",
                 "readwrite-counter-1-counts-changelog"):
        assert name in proc.stderr


def test_a_limit_below_one_is_refused(tmp_path: Path) -> None:
    for bad in ("0", "-3"):
        proc = run_cli("dump", COUNTER, "events", "--limit", bad, cwd=tmp_path)
        assert proc.returncode == 2 and "--limit" in proc.stderr and "Traceback" not in proc.stderr


def test_dump_into_a_closed_pipe_stops_quietly(tmp_path: Path) -> None:
    assert run_cli("load", COUNTER, "events", str(_jsonl(tmp_path / "e.jsonl", 50_000)),
                   cwd=tmp_path).returncode == 0
    proc = subprocess.Popen([CLI, "dump", COUNTER, "events"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert json.loads(first)["value"]["pad"] == "x"
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_limit_reads_the_tail_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import examples.readwrite_counter as counter

    job = LocalJob(counter.app, {"job.dir": str(tmp_path / "job")}, run=False)
    try:
        n = 200_000
        log = job.log_of(job.stream_system["events"])
        for p in range(4):  # 800,000 records, in segments of 10,000
            for first in range(0, n, 10_000):
                log.append("events", p, [
                    (str(i).encode(), b'{"id":%d,"p":%d}' % (i, p), None)
                    for i in range(first, first + 10_000)])
        source = dump_sources(job)["events"]
        read = []
        original = source.log.read_with_offsets

        def counting(stream: str, partition: int, offset: int, limit: int):
            got = original(stream, partition, offset, limit)
            read.append(len(got[1]))
            return got
        monkeypatch.setattr(source.log, "read_with_offsets", counting)

        tail = [json.loads(line) for line in dump_lines(source, 5)]
        assert tail == [{"key": str(i), "value": {"id": i, "p": 3}}
                        for i in range(n - 5, n)]
        assert sum(read) < 1_000, f"--limit 5 read {sum(read)} records"

        # across partitions: the last partition's messages, then the one before's
        read.clear()
        two = [json.loads(line) for line in dump_lines(source, n + 2)]
        assert two[:2] == [{"key": str(i), "value": {"id": i, "p": 2}} for i in (n - 2, n - 1)]
        assert len(two) == n + 2 and two[2]["value"] == {"id": 0, "p": 3}

        # a whole dump reads a batch at a time
        read.clear()
        count = sum(1 for _ in dump_lines(source))
        assert count == 4 * n and max(read) <= 10_000
    finally:
        job.close()
