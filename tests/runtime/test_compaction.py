"""Changelog compaction on the local log: the latest entry of each key below the checkpoint,
at its own offset. On real LMDB files; the job-level tests run the CLI as real processes and
kill one with SIGKILL in the middle of a compaction."""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.local import compaction
from runtime.local.clients import LocalProducer
from runtime.local.compaction import compact_partition, dirty_records
from runtime.local.log import LocalLog
from runtime.local.segments import SEGMENT_BYTES
from runtime.local.state import LogChangelog
from runtime.local.system import LocalJob, task_dir
from runtime.state.lmdb_store import LmdbStore

ROOT = Path(__file__).resolve().parents[2]
COUNTER = f"{ROOT / 'examples' / 'readwrite_counter.py'}:app"
CHANGELOG = "readwrite-counter-1-counts-changelog"
Entry = tuple[bytes, bytes | None]


def _all(lg: LocalLog, stream: str, p: int, step: int = 1000) -> list[tuple[int, Any]]:
    """Every (offset, record) of a partition, through ``read_with_offsets``."""
    out: list[tuple[int, Any]] = []
    pos = 0
    while True:
        offsets, records = lg.read_with_offsets(stream, p, pos, step)
        if not records:
            return out
        out += zip(offsets, records, strict=True)
        pos = offsets[-1] + 1


def _all_plain(lg: LocalLog, stream: str, p: int, step: int = 1000) -> list[tuple[int, Any]]:
    """The same through ``read``, as the job's consumer reads: runs of consecutive offsets."""
    out: list[tuple[int, Any]] = []
    pos = 0
    while True:
        first, records = lg.read(stream, p, pos, step, whole_segments=True)
        if not records:
            return out
        out += [(first + i, r) for i, r in enumerate(records)]
        pos = first + len(records)


def _fold(records: list[tuple[int, Any]], upto: int) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for o, (k, v, _) in records:
        if o >= upto:
            break
        if v is None:
            state.pop(k, None)
        else:
            state[k] = v
    return state


def test_many_updates_to_few_keys_are_compacted(tmp_path: Path) -> None:
    lg = LocalLog(tmp_path / "log")
    lg.create("cl", 1)
    rng = random.Random(7)
    for _ in range(400):  # 100,000 updates of 50 keys, in segments of 250
        lg.append("cl", 0, [(b"k%d" % rng.randrange(50), b"%d" % rng.randrange(10**6), None)
                            for _ in range(250)])
    before = _all(lg, "cl", 0)
    upto = 90_125  # inside a segment: compaction stops at the segment before it
    r = compact_partition(lg, "cl", 0, upto)
    assert r.done and r.upto == 90_000 and r.records_before == 90_000
    after = _all(lg, "cl", 0)
    below = [(o, rec) for o, rec in after if o < 90_000]
    assert len(below) == r.records_after <= 50
    # each kept record is its key's last below the point, at the offset it was written at
    last = {rec[0]: (o, rec) for o, rec in before if o < 90_000}
    assert sorted(below) == sorted(last.values())
    assert [rec for rec in after if rec[0] >= 90_000] == before[90_000:]  # the tail untouched
    assert lg.end_offset("cl", 0) == 100_000
    assert _all_plain(lg, "cl", 0) == after == _all(lg, "cl", 0, step=7)
    for cut in (90_000, 95_555, 100_000):
        assert _fold(after, cut) == _fold(before, cut)
    # appends go on at the same offsets; a second pass merges the compacted part with the rest
    assert lg.append("cl", 0, [(b"k1", b"new", None)]) == 100_000
    assert dirty_records(lg, "cl", 0, 100_001) == (10_001, r.records_after)
    again = compact_partition(lg, "cl", 0, 100_001)
    assert again.upto == 100_001 and again.records_after <= 50
    assert _fold(_all(lg, "cl", 0), 100_001)[b"k1"] == b"new"
    # `read` keeps the compacted segment it read decoded: a pass rewriting it at its key shows
    first, (rec,) = lg.read("cl", 0, 0, 1)
    lg.append("cl", 0, [(rec[0], b"newer", None)])
    compact_partition(lg, "cl", 0, 100_002)
    assert _all_plain(lg, "cl", 0) == _all(lg, "cl", 0)
    assert (first, rec) not in _all(lg, "cl", 0)
    lg.close()


def test_deletes_go_once_a_pass_covered_them_for_the_retention(tmp_path: Path) -> None:
    lg = LocalLog(tmp_path / "log")
    lg.create("cl", 1)
    lg.append("cl", 0, [(b"a", b"1", None), (b"b", b"1", None), (b"a", None, None)])
    lg.append("cl", 0, [(b"c", b"1", None)])
    day = 86_400_000
    r = compact_partition(lg, "cl", 0, 4, now_ms=1_000)
    assert r.tombstones_dropped == 0
    assert [(o, rec[:2]) for o, rec in _all(lg, "cl", 0)] == [
        (1, (b"b", b"1")), (2, (b"a", None)), (3, (b"c", b"1"))]
    # within the retention the delete stays: a reader may have seen a's value before it
    compact_partition(lg, "cl", 0, 4, now_ms=1_000 + day - 1)
    assert [o for o, _ in _all(lg, "cl", 0)] == [1, 2, 3]
    r = compact_partition(lg, "cl", 0, 4, now_ms=1_000 + day)
    assert r.tombstones_dropped == 1
    assert [o for o, _ in _all(lg, "cl", 0)] == [1, 3]
    assert lg.end_offset("cl", 0) == 4
    # every record of a part gone: the part still holds its offsets
    lg.append("cl", 0, [(b"b", None, None), (b"c", None, None)])
    compact_partition(lg, "cl", 0, 6, now_ms=2 * day, delete_retention_ms=0)
    compact_partition(lg, "cl", 0, 6, now_ms=2 * day, delete_retention_ms=0)
    assert _all(lg, "cl", 0) == [] and lg.end_offset("cl", 0) == 6
    assert lg.append("cl", 0, [(b"d", b"1", None)]) == 6
    assert [o for o, _ in _all(lg, "cl", 0)] == [6]
    lg.close()


def test_compacted_segments_stay_small_so_lmdb_reuses_the_pages_they_free(
        tmp_path: Path) -> None:
    """Records that all survive a pass (new keys, as a table with a ttl writes them) are kept
    in compacted segments of ``SEGMENT_BYTES`` at most each (one page), not one large value: a
    value spans contiguous overflow pages, which LMDB finds among its free pages only if they are
    few."""
    lg = LocalLog(tmp_path / "log")
    lg.create("cl", 1)
    for s in range(100):  # 5,000 distinct keys, in segments of 50 records (about 1.6 KB)
        lg.append("cl", 0, [(b"key-%06d" % (s * 50 + i), b"v" * 20, None) for i in range(50)])
    before = _all(lg, "cl", 0)
    r = compact_partition(lg, "cl", 0, 5_000)
    assert r.done and r.records_after == 5_000
    sizes = [size for _first, _span, _ts, size in lg.segments("cl", 0)]
    assert max(sizes) <= SEGMENT_BYTES, sizes  # one of LMDB's pages at most
    assert len(sizes) < 100  # small segments are still merged
    assert _all(lg, "cl", 0) == before
    lg.close()



def test_a_kept_segment_larger_than_a_page_is_cut_into_pieces_that_cover_its_offsets(
        tmp_path: Path) -> None:
    """A compacted segment carries each record's offset, which a plain one does not: a full
    segment that loses one record can grow past a page, and is then written as several, each
    covering the offsets from its first record on, so reads, restores and offsets agree."""
    lg = LocalLog(tmp_path / "log")
    lg.create("cl", 1)
    records = [(b"k%04d" % i, b"v" * 6, None) for i in range(238)]
    lg.append("cl", 0, records)
    lg.append("cl", 0, [(b"k0007", None, None)])  # a later tombstone of one key
    plain = lg.segments("cl", 0)
    assert len(plain) == 2 and SEGMENT_BYTES - 100 < plain[0][3] <= SEGMENT_BYTES  # a full page
    r = compact_partition(lg, "cl", 0, len(records) + 1)  # the tombstone stays (its retention)
    assert r.done and r.records_after == len(records)
    after = lg.segments("cl", 0)
    assert len(after) > len(plain)  # a segment became two
    assert all(size <= SEGMENT_BYTES for *_, size in after), after
    assert [first for first, *_ in after][0] == 0
    # the pieces cover the offsets with no gap and no overlap
    assert all(a[0] + a[1] == b[0] for a, b in pairwise(after))
    assert after[-1][0] + after[-1][1] == len(records) + 1
    expected = [(i, r) for i, r in enumerate(records) if i != 7]
    assert _all(lg, "cl", 0) == [*expected, (238, (b"k0007", None, None))]
    assert _all_plain(lg, "cl", 0)[:7] == expected[:7]
    lg.close()

# -- restore after compaction, against a dict model ------------------------------------------

_op = st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f" * 600]),
                st.one_of(st.none(), st.binary(min_size=1, max_size=3)))
_step = st.one_of(
    st.tuples(st.just("append"), st.lists(_op, min_size=1, max_size=12)),
    st.tuples(st.just("compact"), st.tuples(st.integers(0, 3), st.sampled_from([0, 5, 10**9]))),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=40), group=st.sampled_from([1, 3, 100]),
       held=st.sampled_from([0, 10, 10**6]))
def test_restore_after_compaction_is_the_model(tmp_path_factory: Any, steps: list[Any],
                                               group: int, held: int) -> None:
    """Random puts and deletes; compaction at random checkpoints (never past the latest one,
    never backwards); a restore at every checkpoint from the last compaction point on gives the
    model's state there, through the changelog reader and through a rebuilt LmdbStore."""
    d = tmp_path_factory.mktemp("prop")
    lg = LocalLog(d / "log")
    lg.create("cl", 1)
    model: dict[bytes, bytes] = {}
    at: dict[int, dict[bytes, bytes]] = {0: {}}  # checkpoint offset -> the model there
    point = 0  # the highest compaction point so far
    now = 0
    try:
        for kind, arg in steps:
            if kind == "append":
                lg.append("cl", 0, [(k, v, None) for k, v in arg])
                for k, v in arg:
                    if v is None:
                        model.pop(k, None)
                    else:
                        model[k] = v
                at[lg.end_offset("cl", 0)] = dict(model)
            else:
                back, retention = arg
                cps = sorted(c for c in at if c >= point)
                upto = cps[max(0, len(cps) - 1 - back)]
                now += 7
                r = compact_partition(lg, "cl", 0, upto, now_ms=now,
                                      delete_retention_ms=retention, group_records=group,
                                      held_records=held)
                assert r.done
                point = upto
        records = _all(lg, "cl", 0, step=5)
        assert records == _all_plain(lg, "cl", 0, step=5)
        offsets = [o for o, _ in records]
        assert offsets == sorted(set(offsets))
        below = [rec[0] for o, rec in records if o < point]
        assert len(below) == len(set(below)), "a key twice below the compaction point"
        producer = LocalProducer(lg, 0)
        producer.add_stream("cl", "cl", 1, None)
        changelog = LogChangelog(lg, producer, "cl", 0)
        for cp, expect in at.items():
            if cp < point:
                continue
            got: dict[bytes, bytes] = {}
            for _, entries in changelog.read(0, cp):
                for k, v in entries:
                    if v is None:
                        got.pop(k, None)
                    else:
                        got[k] = v
            assert got == expect, f"restore at {cp} after compaction up to {point}"
        last = max(at)
        store = LmdbStore.open(d / "store", name="s", task="Partition 0", key_encode=bytes,
                               key_decode=bytes, value_encode=bytes, value_decode=bytes,
                               changelog=changelog, checkpointed=last)
        try:
            assert dict(store.all()) == at[last]
        finally:
            store.close()
    finally:
        lg.close()


# -- the job, as real processes ---------------------------------------------------------------

def _cli(*args: str, job_dir: Path, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime.ops.cli", *args, "-c",
                           f"job.dir={job_dir}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def _load(job_dir: Path, events: list[int]) -> None:
    from runtime.ops.loader import load_app
    from samza_dsl import KV

    job = LocalJob(load_app(COUNTER), {"job.dir": str(job_dir)}, run=False)
    try:
        job.load("events", [KV(str(i), {"id": i}) for i in events])
    finally:
        job.close()


def _table(job_dir: Path) -> dict[str, int]:
    """The counts in the job's LMDB stores, as they are on disk."""
    from runtime.ops.loader import load_app

    job = LocalJob(load_app(COUNTER), {"job.dir": str(job_dir)}, run=False)
    table: dict[str, int] = {}
    try:
        for task in job.job.tasks:
            store = LmdbStore.open(job_dir / "stores" / "counts" / task_dir(task.name),
                                   name="counts", task=task.name, key_encode=str.encode,
                                   key_decode=bytes.decode, value_encode=msgspec.json.encode,
                                   value_decode=msgspec.json.decode)
            try:
                table.update(store.all())
            finally:
                store.close()
    finally:
        job.close()
    return table


def _changelog(job_dir: Path) -> tuple[LocalLog, list[int]]:
    """The job's log and each changelog partition's checkpointed offset."""
    from runtime.local.state import LocalCheckpoints

    lg = LocalLog(job_dir / "logs" / "local")
    cps = LocalCheckpoints(lg, "readwrite-counter-1")
    offsets = [cps.read_changelogs(f"Partition {p}")["counts"] for p in range(4)]
    return lg, offsets


# many updates of few keys: flushing after every batch (of 1024 messages at most) writes an
# entry per key and batch
RUN = ("-q", "--show", "0", "-c", "stores.counts.write.batch.size=1", "-c", "task.commit.ms=50")


def _restore_run(job_dir: Path) -> None:
    """The stores deleted, a run rebuilds them from the changelog (no new input)."""
    shutil.rmtree(job_dir / "stores" / "counts")
    run = _cli("run", COUNTER, *RUN, job_dir=job_dir)
    assert run.returncode == 0, run.stderr


def test_restore_is_exact_after_sigkill_mid_compaction(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    rng = random.Random(3)
    events = [rng.randint(1, 3_000) for _ in range(40_000)]
    truth = {str(k): n for k, n in collections.Counter(events).items()}
    _load(job_dir, events)
    run = _cli("run", COUNTER, *RUN, "-c", "stores.counts.changelog.compaction=false",
               job_dir=job_dir)
    assert run.returncode == 0, run.stderr
    assert _table(job_dir) == truth

    lg, cps = _changelog(job_dir)
    before = [_all(lg, CHANGELOG, p) for p in range(4)]
    lg.close()
    assert all(len(b) > 3_000 for b in before), [len(b) for b in before]

    env = dict(os.environ, SAMZA_DSL_CRASH_AT="compaction.transaction:3")
    killed = _cli("compact", COUNTER, "--batch", "500", job_dir=job_dir, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    lg, cps2 = _changelog(job_dir)
    assert cps2 == cps
    partial = [_all(lg, CHANGELOG, p) for p in range(4)]
    lg.close()
    assert len(partial[0]) < len(before[0])  # killed in the middle: partly compacted
    assert partial[0][-1] == before[0][-1]
    for p in range(4):
        assert _fold(partial[p], cps[p]) == _fold(before[p], cps[p])
    _restore_run(job_dir)
    assert _table(job_dir) == truth

    done = _cli("compact", COUNTER, "--batch", "500", job_dir=job_dir)
    assert done.returncode == 0, done.stderr
    assert "partition 0: below offset" in done.stderr
    lg, cps3 = _changelog(job_dir)
    after = [_all(lg, CHANGELOG, p) for p in range(4)]
    lg.close()
    for p in range(4):
        assert _fold(after[p], cps3[p]) == _fold(before[p], cps3[p])
        keys = {rec[0] for _, rec in before[p]}
        assert len([o for o, _ in after[p] if o < cps[p]]) == len(keys)
    _restore_run(job_dir)
    assert _table(job_dir) == truth


def test_dump_shows_a_compacted_changelog_at_its_offsets(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    rng = random.Random(5)
    _load(job_dir, [rng.randint(1, 400) for _ in range(60_000)])
    run = _cli("run", COUNTER, *RUN, "-c", "stores.counts.changelog.compaction=false",
               job_dir=job_dir)
    assert run.returncode == 0, run.stderr
    lg, cps = _changelog(job_dir)
    before = [_all(lg, CHANGELOG, p) for p in range(4)]
    lg.close()
    assert _cli("compact", COUNTER, job_dir=job_dir).returncode == 0

    dump = _cli("dump", COUNTER, CHANGELOG, "--offsets", job_dir=job_dir)
    assert dump.returncode == 0, dump.stderr
    lines = [json.loads(line) for line in dump.stdout.splitlines()]
    expect = []
    for p in range(4):
        last: dict[bytes, tuple[int, Any]] = {}
        for o, rec in before[p]:
            last[rec[0]] = (o, rec)
        expect += [{"partition": p, "offset": o, "message": {
            "key": rec[0].decode(), "value": json.loads(rec[1])}}
            for o, rec in sorted(last.values())]
    assert lines == expect
    assert all(ln["offset"] < cps[ln["partition"]] for ln in lines)
    assert len(lines) < sum(len(b) for b in before) // 5

    tail = _cli("dump", COUNTER, CHANGELOG, "--offsets", "--limit", "3", job_dir=job_dir)
    assert [json.loads(line) for line in tail.stdout.splitlines()] == expect[-3:]
    plain = _cli("dump", COUNTER, CHANGELOG, job_dir=job_dir)
    assert [json.loads(line) for line in plain.stdout.splitlines()] == [
        ln["message"] for ln in expect]


def test_a_running_job_compacts_its_changelog_below_its_checkpoints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.ops.loader import load_app
    from runtime.runner import LocalRunner

    monkeypatch.setattr(compaction, "MIN_DIRTY", 500)
    job_dir = tmp_path / "job"
    rng = random.Random(9)
    events = [rng.randint(1, 2_000) for _ in range(60_000)]
    _load(job_dir, events)
    config = {"job.dir": str(job_dir), "stores.counts.write.batch.size": 1,
              "task.commit.ms": 20}
    runner = LocalRunner(load_app(COUNTER), config).run()
    try:
        results = runner.job.state.compactor.results
        lg = runner.job.log_of("local")
        written = sum(lg.end_offset(CHANGELOG, p) for p in range(4))
        kept = sum(len(_all(lg, CHANGELOG, p)) for p in range(4))
        # as the container closed, a last round compacted below the final checkpoints
        cps = runner.job.checkpoints
        for p in range(4):
            cp = cps.read_changelogs(f"Partition {p}")["counts"]
            dirty, clean = dirty_records(lg, CHANGELOG, p, cp)
            assert dirty < max(500, clean), (p, cp, dirty, clean)
    finally:
        runner.close()
    assert any(r.done and r.records_after < r.records_before for r in results), results
    assert kept < written
    truth = {str(k): n for k, n in collections.Counter(events).items()}
    assert _table(job_dir) == truth
    _restore_run(job_dir)
    assert _table(job_dir) == truth


def test_compact_refuses_while_the_job_runs(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    _load(job_dir, list(range(1, 101)))
    job = subprocess.Popen([sys.executable, "-m", "runtime.ops.cli", "run", COUNTER, "--follow", "-q",
                            "-c", f"job.dir={job_dir}", "-c", "task.commit.ms=100"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = job_dir / "locks" / "job.lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().startswith(f"{job.pid} ")):
            assert job.poll() is None, job.communicate()
            assert time.monotonic() < deadline, "the job did not take its lock"
            time.sleep(0.05)
        refused = _cli("compact", COUNTER, job_dir=job_dir)
        assert refused.returncode == 2, refused.stderr
        assert f"process {job.pid}" in refused.stderr and "Traceback" not in refused.stderr
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGINT)
        job.communicate(timeout=60)
    assert job.returncode == 0
    done = _cli("compact", COUNTER, job_dir=job_dir)
    assert done.returncode == 0, done.stderr


def test_a_job_killed_in_its_background_compaction_restores_exactly(tmp_path: Path) -> None:
    """The job's own compactor kills it (SIGKILL) at its first write transaction; after a clean
    run, the stores rebuilt from the compacted changelog equal the ones kept on disk."""
    job_dir = tmp_path / "job"
    rng = random.Random(11)
    _load(job_dir, [rng.randint(1, 6_000) for _ in range(100_000)])
    env = dict(os.environ, SAMZA_DSL_CRASH_AT="compaction.transaction:1")
    killed = _cli("run", COUNTER, *RUN, job_dir=job_dir, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    lg, _ = _changelog(job_dir)
    kept = sum(len(_all(lg, CHANGELOG, p)) for p in range(4))
    written = sum(lg.end_offset(CHANGELOG, p) for p in range(4))
    lg.close()
    assert kept < written  # one transaction of compaction happened
    run = _cli("run", COUNTER, *RUN, job_dir=job_dir)  # takes the rest of the input
    assert run.returncode == 0, run.stderr
    on_disk = _table(job_dir)
    assert sum(on_disk.values()) >= 100_000  # at least once
    _restore_run(job_dir)
    assert _table(job_dir) == on_disk


def test_a_ttl_changelog_loses_its_segments_older_than_the_ttl_from_its_start(
        tmp_path: Path) -> None:
    """A table's ttl on processing time bounds its changelog: segments appended more than the
    ttl ago go from the partition's start, below the compaction point, whole; offsets stay."""
    lg = LocalLog(tmp_path / "log")
    lg.create("cl", 1)
    for i, ts in enumerate((1_000, 2_000, 3_000, 4_000)):
        lg.append("cl", 0, [(b"k%d" % (10 * i + j), b"v", None) for j in range(10)],
                  timestamp_ms=ts)
    before = _all(lg, "cl", 0)
    # appended before 2,500: the first two segments; the point (25) keeps the third anyway
    assert compaction.expire_partition(lg, "cl", 0, 25, 1_500, now_ms=4_000) == 20
    assert _all(lg, "cl", 0) == before[20:]
    assert compaction.expire_partition(lg, "cl", 0, 25, 1_500, now_ms=4_000) == 0
    # the point below the end: only whole segments below it go; the last one always stays
    assert compaction.expire_partition(lg, "cl", 0, 35, 1, now_ms=10_000) == 10
    assert compaction.expire_partition(lg, "cl", 0, 40, 1, now_ms=10_000) == 0
    assert _all(lg, "cl", 0) == before[30:] and lg.end_offset("cl", 0) == 40
    assert lg.append("cl", 0, [(b"x", b"v", None)]) == 40
    lg.close()


def _ttl_counter(ttl: timedelta) -> Any:
    from examples.readwrite_counter import CountInTable
    from samza_dsl import StreamApplication
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import LocalSystem

    app = StreamApplication("ttl-counter", config={"task.commit.ms": 50})
    local = LocalSystem("local")
    serde = KVSerde(StringSerde(), JsonSerde())
    events = app.input(local.input("events", serde=serde, partitions=2))
    app.table("counts", serde=serde, ttl=ttl)
    events.map(CountInTable(), name="count").send_to(
        app.output(local.output("counts", serde=serde, partitions=2)))
    return app


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_running_job_deletes_its_ttl_changelog_older_than_the_ttl(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guarantee: str) -> None:
    """The embedded job's compactor deletes the changelog segments of a table with a ttl (on
    processing time) older than the ttl, whatever the pass's dirty share: a second run, well
    after the ttl, leaves nothing of the first run's writes in the changelog but the tombstones
    its own sweeps wrote of their keys."""
    from runtime.runner import LocalRunner
    from samza_dsl import KV

    monkeypatch.setattr(compaction, "EXPIRE_SECONDS", 0.0)
    job_dir = tmp_path / "job"
    changelog = "ttl-counter-1-counts-changelog"
    config = {"job.dir": str(job_dir), "job.processing.guarantee": guarantee}
    app = _ttl_counter(timedelta(seconds=3))
    first = [KV(f"a{i}", {"id": i}) for i in range(2_000)]
    LocalRunner(app, config, inputs={"events": first}).run().close()
    lg = LocalLog(job_dir / "logs" / "local")
    assert sum(len(_all(lg, changelog, p)) for p in range(2)) == 2_000
    lg.close()
    time.sleep(3.3)
    job = LocalJob(app, config, run=False)
    try:
        job.load("events", [KV(f"b{i}", {"id": i}) for i in range(2_000)])
    finally:
        job.close()
    runner = LocalRunner(app, config).run()
    expired = dict(runner.job.state.compactor.expired)
    runner.close()
    assert sum(expired.values()) == 2_000, expired
    lg = LocalLog(job_dir / "logs" / "local")
    try:
        held = [rec for p in range(2) for _, rec in _all(lg, changelog, p)]
        assert sum(lg.end_offset(changelog, p) for p in range(2)) >= 4_000
    finally:
        lg.close()
    # the second run's counts, and the tombstones its sweeps wrote of the first run's keys
    assert {r[0] for r in held if r[1] is not None} == {f"b{i}".encode() for i in range(2_000)}
    assert {r[0] for r in held if r[1] is None} <= {f"a{i}".encode() for i in range(2_000)}
