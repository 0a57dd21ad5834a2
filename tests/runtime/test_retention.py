"""Trimming the embedded local log: intermediate streams below the lowest checkpoint of their
consumers, retention of inputs and outputs, and the log's size cap. Real LMDB, real runs."""

from __future__ import annotations

import importlib
import logging
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import LocalRunner
from runtime.local.compaction import compact_partition
from runtime.local.log import LocalLog
from runtime.local.retention import consumed_point, retention_point
from runtime.local.system import LocalJob
from samza_dsl import KV
from samza_dsl.errors import ConfigError, SamzaError

APP = textwrap.dedent('''
    from samza_dsl import KV, StreamApplication
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import LocalSystem

    SERDE = KVSerde(StringSerde(), JsonSerde())


    def make(name, **config):
        app = StreamApplication(name, config={"task.commit.ms": 50, **config})
        local = LocalSystem("local")
        events = app.input(local.input("events", serde=SERDE, partitions=4))
        out = app.output(local.output("out", serde=SERDE, partitions=3))
        events.partition_by(lambda kv: kv.value["i"] % 7, lambda kv: kv.value,
                            name="by-group").map(lambda kv: KV(str(kv.key), kv.value["i"]),
                                                 name="ids").send_to(out)
        return app


    app = make("trim")
''')
INTERMEDIATE = "trim-1-partition_by-by-group"


@pytest.fixture
def module(tmp_path: Path) -> Any:
    (tmp_path / "trim_app.py").write_text(APP)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.reload(importlib.import_module("trim_app"))
    finally:
        sys.path.remove(str(tmp_path))


def _events(start: int, n: int) -> list[KV[str, Any]]:
    return [KV(f"e{i}", {"i": i}) for i in range(start, start + n)]


def _load(app: Any, config: dict[str, Any], start: int, n: int, batches: int) -> None:
    """``n`` events in ``batches`` loads: as many segments per partition."""
    job = LocalJob(app, config, run=False)
    try:
        step = n // batches
        for b in range(batches):
            job.load("events", _events(start + b * step, step))
    finally:
        job.close()


def _ids(runner: Any) -> list[int]:
    return sorted(m.value for m in runner.messages("out"))


def _intermediate(app: Any, config: dict[str, Any]) -> tuple[str, dict[int, list[int | None]],
                                                            list[list[Any]], LocalJob]:
    """The intermediate stream, each partition's consumers' checkpoints and segments."""
    job = LocalJob(app, config, run=False)
    sid = next(s for s, spec in job.plan.streams.items() if spec.kind == "intermediate")
    phys = job.physical[sid]
    lg = job.log_of(job.stream_system[sid])
    cps = job.checkpoints.tasks()
    out: dict[int, list[int | None]] = {}
    segs = []
    for p in range(job.counts[sid]):
        consumers = [t.name for t in job.job.tasks if (sid, p) in t.ssps]
        out[p] = [cps.get(c, {}).get((sid, p)) for c in consumers]  # type: ignore[call-overload]
        segs.append(lg.segments(phys, p))
    return sid, out, segs, job


def _check_trimmed(app: Any, config: dict[str, Any], some: bool = True) -> None:
    sid, cps, segs, job = _intermediate(app, config)
    try:
        trimmed = 0
        for p, offsets in cps.items():
            assert offsets and all(o is not None for o in offsets), (p, offsets)
            need = min(o for o in offsets if o is not None) + 1
            first, span = segs[p][0][0], segs[p][0][1]
            # nothing a checkpoint still needs is gone; every whole segment below it is
            assert first <= need
            assert first + span > need or len(segs[p]) == 1, (p, need, segs[p][:3])
            trimmed += first
        assert trimmed > 0 or not some
    finally:
        job.close()


def test_start_offset_and_trim_on_plain_and_compacted_segments(tmp_path: Path) -> None:
    lg = LocalLog(tmp_path / "log")
    lg.create("s", 1)
    for i in range(10):  # segments of 10 records: offsets 0..99
        lg.append("s", 0, [(b"k%d" % (j % 3), b"%d" % (i * 10 + j), None) for j in range(10)])
    assert lg.start_offset("s", 0) == 0
    compact_partition(lg, "s", 0, 40)  # offsets 0..39 become one compacted segment
    assert lg.segments("s", 0)[0][:2] == (0, 40)
    assert lg.trim("s", 0, 39) == 0  # the compacted segment reaches past 39: it stays
    assert lg.trim("s", 0, 55) == 50  # the compacted one and the one of 40..49
    assert lg.start_offset("s", 0) == 50
    assert lg.end_offset("s", 0) == 100  # offsets never change
    first, records = lg.read("s", 0, 3, 5)  # below the start: from the start
    assert first == 50 and records[0][1] == b"50"
    offsets, records = lg.read_with_offsets("s", 0, 0, 3)
    assert list(offsets) == [50, 51, 52]
    assert lg.trim("s", 0, 10**6) == 40  # all but the last segment, which holds the end
    assert lg.start_offset("s", 0) == 90 and lg.end_offset("s", 0) == 100
    assert lg.append("s", 0, [(None, b"x", None)]) == 100
    lg.close()


def test_intermediate_stream_is_trimmed_below_the_consumers_checkpoints(
        module: Any, tmp_path: Path) -> None:
    config = {"job.dir": str(tmp_path / "job")}
    _load(module.app, config, 0, 4000, 40)
    assert _ids(LocalRunner(module.app, config).run()) == list(range(4000))
    _check_trimmed(module.app, config, some=False)  # a partition's last segment stays
    # the next runs resume after the checkpoints: nothing they need was trimmed
    _load(module.app, config, 4000, 1000, 10)
    assert _ids(LocalRunner(module.app, config).run()) == list(range(4000, 5000))
    _check_trimmed(module.app, config)
    _load(module.app, config, 5000, 1000, 10)
    assert _ids(LocalRunner(module.app, config).run()) == list(range(5000, 6000))
    _check_trimmed(module.app, config)


def test_intermediate_trimmed_with_two_containers(module: Any, tmp_path: Path) -> None:
    config = {"job.dir": str(tmp_path / "job"), "job.container.count": 2}
    _load(module.app, config, 0, 4000, 40)
    assert _ids(LocalRunner(module.app, config).run()) == list(range(4000))
    _load(module.app, config, 4000, 1000, 10)
    assert _ids(LocalRunner(module.app, config).run()) == list(range(4000, 5000))
    _check_trimmed(module.app, config)
    _load(module.app, config, 5000, 1000, 10)
    assert _ids(LocalRunner(module.app, config).run()) == list(range(5000, 6000))


def test_intermediate_trimmed_with_elasticity_2(module: Any, tmp_path: Path) -> None:
    app = module.make("trim", **{"job.elasticity.factor": 2})
    config = {"job.dir": str(tmp_path / "job")}
    _load(app, config, 0, 4000, 40)
    assert _ids(LocalRunner(app, config).run()) == list(range(4000))
    sid, cps, _, job = _intermediate(app, config)
    job.close()
    assert all(len(v) == 2 for v in cps.values())  # two virtual tasks per partition
    _load(app, config, 4000, 1000, 10)
    assert _ids(LocalRunner(app, config).run()) == list(range(4000, 5000))
    _check_trimmed(app, config)
    _load(app, config, 5000, 1000, 10)
    assert _ids(LocalRunner(app, config).run()) == list(range(5000, 6000))


def test_a_consumer_without_a_checkpoint_blocks_trimming(tmp_path: Path) -> None:
    assert consumed_point([5, None, 9]) == 0
    assert consumed_point([]) == 0
    assert consumed_point([5, 3, 9]) == 4


def _input_log(app: Any, config: dict[str, Any]) -> tuple[LocalJob, LocalLog, str]:
    job = LocalJob(app, config, run=False)
    return job, job.log_of(job.stream_system["events"]), job.physical["events"]


def test_retention_ms_deletes_old_input_segments(module: Any, tmp_path: Path) -> None:
    app = module.make("trim", **{"streams.events.retention.ms": 3_600_000})
    config = {"job.dir": str(tmp_path / "job")}
    job, lg, phys = _input_log(app, config)
    encode = job.codecs["events"].encode
    old = int(time.time() * 1000) - 7_200_000  # two hours ago
    for b in range(5):  # old segments in partition 0, then recent ones
        lg.append(phys, 0, [encode(e) for e in _events(b * 10, 10)], timestamp_ms=old)
    for b in range(5, 10):
        lg.append(phys, 0, [encode(e) for e in _events(b * 10, 10)])
    job.close()
    assert _ids(LocalRunner(app, config).run()) == list(range(100))  # read, then deleted
    job, lg, phys = _input_log(app, config)
    try:
        assert lg.start_offset(phys, 0) == 50  # the old segments went, the recent ones stay
        assert lg.end_offset(phys, 0) == 100
    finally:
        job.close()


def test_retention_bytes_keeps_about_that_many_bytes(module: Any, tmp_path: Path) -> None:
    app = module.make("trim", **{"streams.out.retention.bytes": 4000})
    config = {"job.dir": str(tmp_path / "job")}
    for r in range(4):  # segments of each output partition in every run
        _load(app, config, r * 1000, 1000, 10)
        runner = LocalRunner(app, config).run()
        assert (runner.written() or {}).get("out") == 1000  # retention may take some at once
    job = LocalJob(app, config, run=False)
    try:
        lg, phys = job.log_of(job.stream_system["out"]), job.physical["out"]
        for p in range(3):
            segs = lg.segments(phys, p)
            total = sum(s[3] for s in segs)
            assert lg.start_offset(phys, p) > 0
            # as Kafka: the oldest segments go while what stays holds at least 4000 bytes
            assert len(segs) == 1 or total - segs[0][3] < 4000, (p, segs)
        # the input has no retention: it keeps everything
        assert all(job.log_of("local").start_offset(job.physical["events"], p) == 0
                   for p in range(4))
    finally:
        job.close()


def test_retention_point_by_age_and_size() -> None:
    segs = [(0, 10, 1000, 100), (10, 10, 2000, 100), (20, 5, 3000, 100), (25, 5, 4000, 100)]
    assert retention_point(segs, 5000, -1, -1) == 0
    assert retention_point(segs, 5000, 2500, -1) == 20  # older than 2500 ms: ts < 2500
    assert retention_point(segs, 5000, -1, 250) == 10  # 400 bytes: 300 stay, >= 250
    assert retention_point(segs, 5000, -1, 0) == 30
    assert retention_point(segs, 5000, 100, 1000) == 30


def test_a_checkpoint_below_the_log_start_warns_once_and_continues_at_the_start(
        module: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = {"job.dir": str(tmp_path / "job")}
    _load(module.app, config, 0, 400, 4)
    assert _ids(LocalRunner(module.app, config).run()) == list(range(400))
    _load(module.app, config, 400, 800, 8)
    job, lg, phys = _input_log(module.app, config)
    try:
        checkpoint = job.checkpoints.read("Partition 0")[("events", 0)]  # type: ignore[index]
        segs = lg.segments(phys, 0)
        cut = segs[-3][0]  # retention removed all but the last three segments
        lg.trim(phys, 0, cut)
        assert lg.start_offset(phys, 0) == cut > checkpoint + 1
    finally:
        job.close()
    with caplog.at_level(logging.WARNING, logger="samza_dsl.retention"):
        runner = LocalRunner(module.app, config).run()
    warnings = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.retention"]
    assert len(warnings) == 1, warnings
    assert (f"stream events partition 0: the checkpoint is at offset {checkpoint}" in warnings[0]
            and f"starts at offset {cut}" in warnings[0] and "auto.offset.reset" in warnings[0])
    got = _ids(runner)
    # all but the records of partition 0 retention deleted, exactly once
    assert len(got) == len(set(got)) and set(got) < set(range(400, 1200))
    assert len(got) == 800 - (cut - checkpoint - 1)


def test_reaching_the_size_cap_is_a_clear_error(module: Any, tmp_path: Path) -> None:
    config = {"job.dir": str(tmp_path / "job"), "systems.local.log.max.bytes": 1 << 20}
    job = LocalJob(module.app, config, run=False)
    try:
        with pytest.raises(SamzaError) as info:
            for b in range(100):
                job.load("events", [KV(f"e{i}", {"i": i, "pad": "x" * 200})
                                    for i in range(b * 1000, b * 1000 + 1000)])
        text = str(info.value)
        assert str(job.log_of("local").path) in text and str(1 << 20) in text
        assert "systems.local.log.max.bytes" in text and "retention" in text
        assert "compaction" in text
    finally:
        job.close()
    with pytest.raises(ConfigError, match=r"systems.local.log.max.bytes='lots'.*1 MiB"):
        LocalJob(module.app, {**config, "systems.local.log.max.bytes": "lots"}, run=False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 20), min_size=1, max_size=15),
       checkpoints=st.lists(st.one_of(st.none(), st.integers(0, 400)), min_size=1, max_size=4),
       compact_upto=st.integers(0, 150))
def test_trimming_never_removes_what_a_checkpoint_needs(
        tmp_path_factory: pytest.TempPathFactory, sizes: list[int],
        checkpoints: list[int | None], compact_upto: int) -> None:
    lg = LocalLog(tmp_path_factory.mktemp("log"))
    try:
        lg.create("s", 1)
        n = 0
        for size in sizes:
            lg.append("s", 0, [(b"k%d" % (i % 4), b"%d" % i, None) for i in range(n, n + size)])
            n += size
        if compact_upto:
            compact_partition(lg, "s", 0, min(compact_upto, n))
        checkpoints = [None if c is None else min(c, n - 1) for c in checkpoints]
        before = lg.read_with_offsets("s", 0, 0, n)
        below = consumed_point(checkpoints)
        lg.trim("s", 0, below)
        after = lg.read_with_offsets("s", 0, 0, n)
        need = below  # every record at or after the trim point is still there, unchanged
        kept = [(o, r) for o, r in zip(*before, strict=True) if o >= need]
        assert [(o, r) for o, r in zip(*after, strict=True) if o >= need] == kept
        assert lg.start_offset("s", 0) <= max(need, 0) or len(lg.segments("s", 0)) == 1
        assert lg.end_offset("s", 0) == n
    finally:
        lg.close()


def test_the_summary_counts_what_the_run_wrote_though_retention_deleted_most(
        module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from runtime.engine import handout
    from runtime.summary import print_outputs

    # small batches: the outputs go out in many segments, so retention has whole segments to
    # delete however the stages interleave (one big batch per partition would leave one segment)
    monkeypatch.setattr(handout, "BATCH_BUDGET", 50)
    app = module.make("trim", **{"streams.out.retention.bytes": 2000})
    config = {"job.dir": str(tmp_path / "job"), "task.commit.ms": 20}
    _load(app, config, 0, 6000, 60)
    runner = LocalRunner(app, config).run()
    try:
        kept = len(runner.messages("out"))
        assert kept < 3000, f"retention kept {kept} of 6000: the case needs most deleted"
        text = io.StringIO()
        print_outputs(runner, out=text, limit=4)
        lines = text.getvalue().splitlines()
        assert "out: 6000 message(s)" in lines, lines
        assert "out: 6,000 message(s) (6,000 to out)" in lines, lines
        shown = [ln for ln in lines if ln.startswith("  KV(")]
        assert len(shown) == 4
        assert set(shown) <= {f"  {m!r}" for m in runner.messages("out")}  # still there
        assert "  ... 5996 more, not shown" in lines, lines
    finally:
        runner.close()
