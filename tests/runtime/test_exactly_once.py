"""Exactly once on the embedded local system (``job.processing.guarantee=exactly-once``), for real.

The proof: the job of ``eos_app.py`` (one output per input carrying the input's partition and
offset; a counter table behind an intermediate stream emitting each key's running count) runs
as a subprocess on the local log and is killed with SIGKILL at 30 seeded points: at random
times, after a processed batch, and at each step of a commit (``runtime.engine.faults.TXN_POINTS``).
After each kill more input arrives, some of it records that do not decode (dead letters); a
last run finishes. Then every input appears exactly once in ``seen`` (no duplicate, no gap),
each key's counts run 1, 2, ... n with no repeat, and each dead letter is there once. The kills
run in three job directories at once, to keep the wall time down.

The same test under ``at-least-once`` finds duplicates, which shows it can fail. And a
visibility test: under exactly-once a reader of the log (``samza-dsl dump``) sees nothing of a
running job's outputs before its first commit, and then all of them; at least once, it does.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from runtime.engine.codec import SOURCE_HEADER, StreamCodec, control_record, keep_earlier_watermarks
from runtime.engine.faults import POINTS, TXN_POINTS
from runtime.engine.job import SSP
from runtime.engine.records import EndOfStream, Watermark
from runtime.host.jobdir import dead_letter_stream
from runtime.local.log import LocalLog
from runtime.local.state import LocalCheckpoints
from runtime.local.system import LocalJob
from runtime.ops.loader import load_app
from samza_dsl import KV
from samza_dsl.serdes import JsonSerde
from tests.proc_helpers import finish

ROOT = Path(__file__).resolve().parents[2]
APP_FILE = Path(__file__).resolve().parent / "eos_app.py"
APP = f"{APP_FILE}:app"
SEED = int(os.environ.get("SAMZA_DSL_EOS_SEED", "20260412"))
KILLS = 30  # over all lanes
LANES = 3
CHUNK = 1200  # input messages a round adds
KEYS = 40
BAD_EVERY = 97  # one record in this many does not decode: a dead letter
_LOAD_LOCK = threading.Lock()


def _run(job_dir: Path, guarantee: str, crash_at: str | None, kill_after: float | None,
         extra: tuple[str, ...] = ()) -> tuple[int, str]:
    """One run of the proof job in a subprocess, killed at ``crash_at`` or after
    ``kill_after`` seconds; its exit code and stderr."""
    env = dict(os.environ)
    env.pop("SAMZA_DSL_CRASH_AT", None)
    if crash_at:
        env["SAMZA_DSL_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "runtime.ops.cli", "run", APP, "-c", f"job.dir={job_dir}",
           "-c", f"job.processing.guarantee={guarantee}", "-c", "task.commit.ms=25",
           "-c", "streams.events.samza.serde.error=dead-letter",
           "-c", "user.eos.sleep.ms=15", "-q", "--show", "0", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return finish(proc, kill_after, 120)


def _load(job_dir: Path, rng: random.Random, expected: set[tuple[int, int]],
          bad: set[tuple[int, int]] | None) -> None:
    """A round of input: each message carries its own partition and offset; with ``bad``, one
    in ``BAD_EVERY`` is bytes that do not decode (noted there)."""
    with _LOAD_LOCK:  # planning in several threads at once is not what a job does
        job = LocalJob(load_app(APP), {"job.dir": str(job_dir)}, run=False)
    try:
        log = job.log_of("local")
        encode = job.codecs["events"].encode
        parts: dict[int, list[Any]] = collections.defaultdict(list)
        ends = {p: log.end_offset("events", p) for p in range(4)}
        for _ in range(CHUNK):
            p = rng.randrange(4)
            offset = ends[p] + len(parts[p])
            key = f"k{rng.randrange(KEYS)}"
            if bad is not None and rng.randrange(BAD_EVERY) == 0:
                parts[p].append((key.encode(), b"{not json", None))
                bad.add((p, offset))
            else:
                parts[p].append(encode(KV(key, {"p": p, "o": offset})))
                expected.add((p, offset))
        for p, records in parts.items():
            log.append("events", p, records)
    finally:
        job.close()


def _pick(rng: random.Random, points: tuple[str, ...], killed: set[str], left: int
          ) -> tuple[str | None, float | None, str]:
    """Where the next run is killed: a fault point ``name:n``, or a time in seconds. Points
    not ``killed`` at yet come first, so that ``left`` kills reach every point."""
    todo = [p for p in points if p not in killed]
    if left > len(todo) and rng.random() < 0.3:
        after = rng.uniform(0.4, 1.1)
        return None, after, f"after {after:.2f}s"
    point = rng.choice(todo or points)
    point = f"{point}:{rng.randint(1, 6 if point == 'batch' else 4)}"
    return point, None, point


def _lane(job_dir: Path, guarantee: str, kills: int, seed: int,
          points: tuple[str, ...]) -> dict[str, Any]:
    """Kill the job ``kills`` times in ``job_dir``, more input before each run, then a last run
    to the end. Returns what was loaded and where the kills were."""
    rng = random.Random(seed)
    expected: set[tuple[int, int]] = set()
    bad: set[tuple[int, int]] = set()
    where: list[str] = []
    killed: set[str] = set()
    rounds = 0
    while len(where) < kills:
        rounds += 1
        assert rounds <= kills * 3, f"{job_dir}: only {len(where)} kills in {rounds} rounds"
        _load(job_dir, rng, expected, bad)
        point, after, words = _pick(rng, points, killed, kills - len(where))
        code, err = _run(job_dir, guarantee, point, after)
        if code == -signal.SIGKILL:
            where.append(words)
            if point:
                killed.add(point.rpartition(":")[0])
        elif code != 0:
            raise AssertionError(f"{job_dir} run {rounds} ({words}) exited with {code}:\n{err}")
    code, err = _run(job_dir, guarantee, None, None)
    assert code == 0, err
    return {"dir": job_dir, "expected": expected, "bad": bad, "kills": where}


def _found(lane: dict[str, Any]) -> dict[str, Any]:
    """What the job's log holds: input positions in ``seen`` with their counts, each key's
    counts in order, the dead letters' sources, and whether every input is checkpointed."""
    job = LocalJob(load_app(APP), {"job.dir": str(lane["dir"])}, run=False)
    try:
        seen = collections.Counter(tuple(m.value) for m in job.messages("seen", since_start=False))
        counts: dict[str, list[int]] = collections.defaultdict(list)
        for m in job.messages("counts", since_start=False):
            counts[m.key].append(m.value)
        log = job.log_of("local")
        dead = dead_letter_stream(job.job_name)
        sources: collections.Counter[str] = collections.Counter()
        pos = 0
        while True:
            first, records = log.read(dead, 0, pos, 4096)
            if not records:
                break
            for _, _, headers in records:
                sources.update(v.decode() for k, v in headers or () if k == SOURCE_HEADER)
            pos = first + len(records)
        cps = LocalCheckpoints(log, job.job_name).tasks()
        offsets = {ssp.partition: o for cp in cps.values() for ssp, o in cp.items()
                   if ssp.stream_id == "events"}
        ended = offsets == {p: log.end_offset("events", p) - 1 for p in range(4)}
    finally:
        job.close()
    return {"seen": seen, "counts": counts, "dead": sources, "ended": ended}


def _truth(expected: set[tuple[int, int]], job_dir: Path) -> dict[str, int]:
    """Each key's true count: how many of the inputs that decode carry it."""
    job = LocalJob(load_app(APP), {"job.dir": str(job_dir),
                                   "streams.events.samza.serde.error": "skip"}, run=False)
    try:
        truth: collections.Counter[str] = collections.Counter()
        for m in job.messages("events", since_start=False):
            if (m.value["p"], m.value["o"]) in expected:
                truth[m.key] += 1
    finally:
        job.close()
    return dict(truth)


def _lanes(tmp_path: Path, guarantee: str, kills: int, lanes: int,
           points: tuple[str, ...]) -> list[dict[str, Any]]:
    per = [kills // lanes + (i < kills % lanes) for i in range(lanes)]
    with ThreadPoolExecutor(lanes) as pool:
        futures = [pool.submit(_lane, tmp_path / f"{guarantee}-{i}", guarantee, per[i],
                               SEED + 101 * i, points) for i in range(lanes)]
        return [f.result() for f in futures]


def test_exactly_once_holds_under_sigkill_at_30_points(tmp_path: Path) -> None:
    started = time.monotonic()
    lanes = _lanes(tmp_path, "exactly-once", KILLS, LANES, TXN_POINTS)
    kills = [k for lane in lanes for k in lane["kills"]]
    assert len(kills) == KILLS
    # every commit step and the batches were among the kill points
    assert {k.rpartition(":")[0] for k in kills if ":" in k} == set(TXN_POINTS), kills
    for lane in lanes:
        found = _found(lane)
        seen, expected = found["seen"], lane["expected"]
        twice = sorted(p for p, n in seen.items() if n > 1)
        assert not twice, f"{lane['dir']}: inputs emitted more than once: {twice[:10]}"
        gaps = sorted(expected - set(seen))
        assert not gaps, f"{lane['dir']}: inputs never emitted: {gaps[:10]}"
        assert set(seen) == expected
        truth = _truth(expected, lane["dir"])
        assert set(found["counts"]) == set(truth)
        for key, n in truth.items():
            assert found["counts"][key] == list(range(1, n + 1)), \
                f"{lane['dir']}: key {key}'s counts are {found['counts'][key]}, not 1..{n}"
        assert found["dead"] == collections.Counter(
            f"events/{p}/{o}" for p, o in lane["bad"]), "each dead letter once"
        assert found["ended"], "the last run checkpointed every input to its end"
    print(f"{len(kills)} kills in {time.monotonic() - started:.1f}s: {', '.join(kills)}")


def test_the_proof_finds_duplicates_at_least_once(tmp_path: Path) -> None:
    """The same kills at least once: outputs of messages processed again appear twice, which
    the proof above would catch."""
    lanes = _lanes(tmp_path, "at-least-once", 6, 1, POINTS)
    found = _found(lanes[0])
    twice = [p for p, n in found["seen"].items() if n > 1]
    truth = _truth(lanes[0]["expected"], lanes[0]["dir"])
    repeated = [k for k, n in truth.items() if found["counts"][k] != list(range(1, n + 1))]
    assert twice and repeated, (twice[:5], repeated[:5], lanes[0]["kills"])
    assert set(found["seen"]) == lanes[0]["expected"]  # but nothing is lost


def _dump(job_dir: Path, stream: str) -> int:
    """How many messages ``samza-dsl dump`` prints of a stream, in another process."""
    out = subprocess.run([sys.executable, "-m", "runtime.ops.cli", "dump", APP, stream, "-c",
                          f"job.dir={job_dir}"], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60)
    return sum(1 for line in out.stdout.splitlines() if line.strip())


def _covered(log: LocalLog, job_name: str) -> int:
    """How many inputs the job's checkpoints cover."""
    return sum(o + 1 for cp in LocalCheckpoints(log, job_name).tasks().values()
               for ssp, o in cp.items() if ssp.stream_id == "events")


def _visibility(tmp_path: Path, guarantee: str) -> tuple[list[tuple[int, int, int]], int]:
    """Run the proof job for a few seconds in another process (``task.commit.ms=2000``) and
    read the log from this one as it runs: samples of (inputs checkpointed before, outputs in
    ``seen``, inputs checkpointed after), ``dump``'s among them; and how many inputs."""
    job_dir = tmp_path / guarantee
    expected: set[tuple[int, int]] = set()
    rng = random.Random(SEED)
    for _ in range(12):
        _load(job_dir, rng, expected, None)
    env = dict(os.environ)
    env.pop("SAMZA_DSL_CRASH_AT", None)
    cmd = [sys.executable, "-m", "runtime.ops.cli", "run", APP, "-c", f"job.dir={job_dir}",
           "-c", f"job.processing.guarantee={guarantee}", "-c", "task.commit.ms=2000",
           "-c", "user.eos.sleep.ms=25", "-q", "--show", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    samples: list[tuple[int, int, int]] = []
    log = LocalLog(job_dir / "logs" / "local")
    try:
        job_name = "eos-proof-1"
        while proc.poll() is None:
            before = _covered(log, job_name)
            if len(samples) % 10 == 5:  # now and then, through the CLI
                visible = _dump(job_dir, "seen")
            else:
                visible = sum(log.end_offset("seen", p) for p in range(4))
            samples.append((before, visible, _covered(log, job_name)))
            time.sleep(0.05)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        samples.append((_covered(log, job_name), _dump(job_dir, "seen"),
                        _covered(log, job_name)))
    finally:
        log.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return samples, len(expected)


def test_a_reader_sees_outputs_only_as_commits_cover_them(tmp_path: Path) -> None:
    """Exactly once, whatever a reader of the log (``samza-dsl dump`` in another process
    among them) reads while the job runs is exactly the outputs of the inputs its checkpoints
    cover: nothing before the first commit, everything at the end. At least once, the same
    reader sees outputs ahead of the checkpoints."""
    samples, n = _visibility(tmp_path, "at-least-once")
    assert any(visible > after for _, visible, after in samples), samples
    assert samples[-1] == (n, n, n)

    samples, n = _visibility(tmp_path, "exactly-once")
    assert samples.count((0, 0, 0)) >= 5, samples  # the job runs, nothing is seen
    for before, visible, after in samples:
        assert before <= visible <= after, (before, visible, after)
    assert samples[-1] == (n, n, n)


def test_a_remote_table_write_stays_at_least_once_and_says_so_once(
        tmp_path: Path, caplog: Any) -> None:
    """The remote-profiles example (a remote table it reads and writes, over HTTP on
    127.0.0.1) runs exactly once on the local system, and warns once at start that its writes
    to the remote table stay at least once; at least once, it does not warn."""
    import logging

    from examples.remote_profiles import build_app, sample_input, sample_profiles
    from runtime import LocalRunner
    from samza_dsl.testing.kv_service import KVService

    inputs = sample_input(300)
    with KVService(sample_profiles()) as service:
        app = build_app(service.url)
        for guarantee in ("at-least-once", "exactly-once"):
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="samza_dsl.exactly_once"):
                runner = LocalRunner(app, {"job.dir": str(tmp_path / guarantee),
                                           "job.processing.guarantee": guarantee},
                                     inputs=inputs).run()
            assert len(runner.messages("enriched-views")) == len(inputs["page-views"])
            runner.close()
            warned = [r.getMessage() for r in caplog.records
                      if r.name == "samza_dsl.exactly_once"]
            if guarantee == "at-least-once":
                assert warned == []
            else:
                assert len(warned) == 1, warned
                assert "remote table(s) profiles stay at least once" in warned[0]


def test_many_records_waiting_commit_early_in_bounded_segments(tmp_path: Path,
                                                                monkeypatch: Any) -> None:
    """A task's records wait in memory until its commit: past ``COMMIT_BYTES`` it commits
    before ``task.commit.ms`` (here -1: at the end only), and a commit writes segments of at
    most ``SEGMENT_RECORDS``; every output is there once."""
    from runtime import LocalRunner
    from runtime.local import exactly_once

    monkeypatch.setattr(exactly_once, "COMMIT_BYTES", 20_000)
    monkeypatch.setattr(exactly_once, "SEGMENT_RECORDS", 100)
    inputs = {"events": {p: [KV(f"k{i % 7}", {"p": p, "o": i}) for i in range(1500)]
                         for p in range(4)}}
    runner = LocalRunner(load_app(APP), {"job.dir": str(tmp_path / "job"), "task.commit.ms": -1,
                                         "job.processing.guarantee": "exactly-once"},
                         inputs=inputs).run()
    try:
        assert runner.container is not None and runner.container.commits > 4  # 4 tasks
        seen = sorted(tuple(m.value) for m in runner.messages("seen"))
        assert seen == sorted((p, i) for p in range(4) for i in range(1500))
        log = runner.job.log_of("local")
        sizes = [n for p in range(4) for _, n, _, _ in log.segments("seen", p)]
        assert sum(sizes) == 6000 and max(sizes) <= 100
    finally:
        runner.close()


def test_two_container_processes_read_each_others_committed_records(tmp_path: Path) -> None:
    """Exactly once in two container processes: a task reads the intermediate records a task
    of the other container committed; every input is counted once."""
    from runtime import LocalRunner

    expected: set[tuple[int, int]] = set()
    job_dir = tmp_path / "job"
    rng = random.Random(SEED + 7)
    for _ in range(2):
        _load(job_dir, rng, expected, None)
    LocalRunner(load_app(APP), {"job.dir": str(job_dir), "job.container.count": 2,
                                "job.processing.guarantee": "exactly-once"}).run()
    found = _found({"dir": job_dir})
    assert set(found["seen"]) == expected and max(found["seen"].values()) == 1
    truth = _truth(expected, job_dir)
    assert {k: found["counts"][k] for k in truth} == {
        k: list(range(1, n + 1)) for k, n in truth.items()}


def test_a_store_flushed_before_a_lost_commit_comes_back_to_the_checkpoint(
        tmp_path: Path) -> None:
    """Stores flush into their local files between commits (here every 5 dirty keys); a kill
    at the start of a commit leaves those files ahead of the checkpoint, marked uncommitted:
    the restart rebuilds them from the changelog up to the checkpoint, and no count repeats."""
    from runtime import LocalRunner

    job_dir = tmp_path / "job"
    expected: set[tuple[int, int]] = set()
    rng = random.Random(SEED + 3)
    _load(job_dir, rng, expected, None)
    code, err = _run(job_dir, "exactly-once", None, None)
    assert code == 0, err
    _load(job_dir, rng, expected, None)
    # the second round of commits starts after the tasks counted what the first committed
    code, err = _run(job_dir, "exactly-once", "commit.start:7", None,
                     ("-c", "stores.counts.write.batch.size=5", "-c", "task.commit.ms=200"))
    assert code == -signal.SIGKILL, err
    runner = LocalRunner(load_app(APP), {"job.dir": str(job_dir),
                                         "job.processing.guarantee": "exactly-once"}).run()
    try:
        modes = {i["mode"] for i in runner.job.state.restores.values()}
        assert "rebuilt" in modes and modes <= {"rebuilt", "host-affinity"}, modes
    finally:
        runner.close()
    found = _found({"dir": job_dir})
    assert set(found["seen"]) == expected and max(found["seen"].values()) == 1
    truth = _truth(expected, job_dir)
    assert {k: found["counts"][k] for k in truth} == {
        k: list(range(1, n + 1)) for k, n in truth.items()}


def test_an_earlier_runs_watermarks_count_where_their_task_still_writes() -> None:
    """Exactly once, a watermark an earlier run committed into an intermediate stream counts
    where it stands, if its task writes the stream in this run too; an earlier run's end of
    stream never does, nor at least once (no ``earlier_marks``) an earlier run's watermark
    (docs/semantics.md, "Control records across runs")."""
    ssp = SSP("hop", 0)
    records = [control_record(Watermark("Partition 0", 9750), 1),
               control_record(Watermark("Partition 0 bucket 1 of 2", 9750), 1),
               control_record(EndOfStream("Partition 0"), 1),
               control_record(Watermark("Partition 0", 12000), 2)]
    codec = StreamCodec("hop", JsonSerde())
    assert [type(m).__name__ for m in codec.decode_batch(ssp, 0, records, 2)] == \
        ["Skipped", "Skipped", "Skipped", "Watermark"]
    keep_earlier_watermarks({"hop": codec}, {"hop": frozenset({"Partition 0"})})
    got = codec.decode_batch(ssp, 0, records, 2)
    assert got[0] == Watermark("Partition 0", 9750)
    assert [type(m).__name__ for m in got[1:]] == ["Skipped", "Skipped", "Watermark"]
    # a run older than the one that wrote it (fenced) takes none of a newer run's
    assert type(codec.decode_batch(ssp, 3, records[3:], 1)[0]).__name__ == "Skipped"


def test_a_bounded_run_through_a_hop_ends_without_waiting_for_the_commit_interval(
        tmp_path: Path) -> None:
    """A task reads its input and, after partition_by, what the job's tasks wrote: exactly once
    those records are visible only once committed, so a task idle with its input ended commits
    then, rather than at the next task.commit.ms (here 10 minutes), and the run ends."""
    from runtime import LocalRunner
    from samza_dsl import StreamApplication
    from samza_dsl.serdes import KVSerde, StringSerde
    from samza_dsl.systems import LocalSystem

    serde = KVSerde(StringSerde(), JsonSerde())
    local = LocalSystem("local")
    app = StreamApplication("hopped", config={"job.processing.guarantee": "exactly-once",
                                              "task.commit.ms": 600_000})
    (app.input(local.input("in", serde=serde, partitions=2))
     .partition_by(lambda kv: kv.value["to"], lambda kv: kv.value, serde=serde, name="by-to")
     .send_to(app.output(local.output("out", serde=serde, partitions=1))))
    given = {p: [KV(f"k{i}", {"to": f"t{i % 5}", "i": i}) for i in range(p, 60, 2)]
             for p in range(2)}
    began = time.monotonic()
    result = LocalRunner(app, {"job.dir": str(tmp_path)}, inputs={"in": given}).run()
    try:
        took = time.monotonic() - began
        assert sorted(kv.value["i"] for kv in result.messages("out")) == list(range(60))
    finally:
        result.close()
    assert took < 60, f"the run waited {took:.0f} s for a commit interval"
