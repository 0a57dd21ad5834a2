"""The embedded local system end to end: LMDB log, LMDB stores with changelogs, checkpoints,
resume, store loss and corruption, serde error policies."""

from __future__ import annotations

import collections
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from example_apps import load_example

from runtime import LocalRunner
from runtime.engine.codec import ERROR_HEADER, SOURCE_HEADER
from runtime.local.state import LocalCheckpoints
from runtime.local.system import LocalJob, dead_letter_stream
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import SamzaError, SerdeError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

page_views = load_example("page_view_counts")
counter = load_example("readwrite_counter")


def _multiset(messages: list[Any]) -> collections.Counter[Any]:
    return collections.Counter(repr(m) for m in messages)


def _final_counts(messages: list[KV[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in messages:
        out[m.key] = max(out.get(m.key, 0), m.value)
    return out


def _true_counts(events: list[KV[str, Any]]) -> dict[str, int]:
    return dict(collections.Counter(e.key for e in events))


def _input_offsets(tasks: dict[str, dict[Any, int]]) -> dict[Any, int]:
    return {ssp: off for offsets in tasks.values() for ssp, off in offsets.items()
            if ssp.stream_id in ("page-views", "logins")}


# -- the page-view example: same results as in memory; a second run resumes ---------------------

def test_page_view_counts_on_the_local_system_counts_the_views_and_resumes(
        tmp_path: Path) -> None:
    # the same partitions in both runs: by key, as a producer would write them
    from operators.hashing import partition_for

    inputs = {sid: {p: [m for m in msgs if partition_for(m.key.encode(), n) == p]
                    for p in range(n)}
              for (sid, msgs), n in zip(page_views.sample_input(3000, seed=5).items(), (4, 2),
                                        strict=True)}
    # A view joins the logins of its user handed out before it (docs/semantics.md rule 9), and
    # no rule orders two streams against each other, so the logins go in a run of their own
    # first: then every view finds its user's login, whatever the chunks they are handed out in
    # (the memory system and the local log hand them out in other chunks; comparing the two on
    # one mixed run compared those chunks)
    logins_only = {sid: (msgs if sid == "logins" else {p: [] for p in msgs})
                   for sid, msgs in inputs.items()}
    views_only = {sid: (msgs if sid != "logins" else {p: [] for p in msgs})
                  for sid, msgs in inputs.items()}
    config = {"job.dir": str(tmp_path / "job")}
    LocalRunner(page_views.app, config, inputs=logins_only).run().close()
    first = LocalRunner(page_views.app, config, inputs=views_only).run()
    try:
        got = first.messages("page-view-counts")
        assert got, "the views found their logins"
        assert sum(m.value["views"] for m in got) >= 0.8 * sum(
            1 for p in inputs["page-views"].values() for m in p
            if page_views.is_human(m)), "nearly every human view found its user's login"
        checkpoints = _input_offsets(first.job.checkpoints.tasks())
    finally:
        first.close()

    second = LocalRunner(page_views.app, config, inputs=views_only).run()  # not loaded again
    try:
        assert second.messages("page-view-counts") == []
        assert second.status()["processed"] < 50  # only control records, nothing reprocessed
        # inputs stay where they were; intermediate streams got this run's control records
        assert _input_offsets(second.job.checkpoints.tasks()) == checkpoints
        # the stores were used as they were (host affinity): nothing replayed
        modes = {info["mode"] for info in second.job.state.restores.values()}
        assert modes == {"host-affinity"}
    finally:
        second.close()


def test_more_input_after_a_run_is_processed_once(tmp_path: Path) -> None:
    config = {"job.dir": str(tmp_path / "job")}
    events = counter.sample_input(4000, ids=50)["events"]
    a, b = events[:2500], events[2500:]
    LocalRunner(counter.app, config, inputs={"events": a}).run().close()
    job = LocalJob(counter.app, config, run=False)
    try:
        assert job.load("events", b) == len(b)
    finally:
        job.close()
    runner = LocalRunner(counter.app, config).run()
    try:
        out = runner.messages("counts")
        assert len(out) == len(b)
        assert _final_counts(out) == {k: v for k, v in _true_counts(events).items()
                                      if k in {e.key for e in b}}
    finally:
        runner.close()


# -- stores: lost, corrupt, host affinity --------------------------------------------------------

def _store_dirs(root: Path, store: str) -> list[Path]:
    return sorted((root / "stores" / store).iterdir())


def test_lost_store_is_rebuilt_from_its_changelog(tmp_path: Path) -> None:
    root = tmp_path / "job"
    config = {"job.dir": str(root)}
    events = counter.sample_input(3000, ids=40)["events"]
    LocalRunner(counter.app, config, inputs={"events": events[:2000]}).run().close()
    import shutil
    shutil.rmtree(root / "stores")
    job = LocalJob(counter.app, config, run=False)
    job.load("events", events[2000:])
    job.close()
    runner = LocalRunner(counter.app, config).run()
    try:
        modes = {info["mode"] for info in runner.job.state.restores.values()}
        assert modes == {"rebuilt"}
        assert sum(info["entries_replayed"] for info in runner.job.state.restores.values()) > 0
        assert _final_counts(runner.messages("counts")) == {
            k: v for k, v in _true_counts(events).items() if k in {e.key for e in events[2000:]}}
    finally:
        runner.close()


def test_corrupt_store_file_is_named_and_rebuilt(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "job"
    config = {"job.dir": str(root)}
    events = counter.sample_input(2000, ids=30)["events"]
    LocalRunner(counter.app, config, inputs={"events": events[:1000]}).run().close()
    victim = _store_dirs(root, "counts")[0] / "data.mdb"
    victim.write_bytes(b"this is not an LMDB file" * 100)
    job = LocalJob(counter.app, config, run=False)
    job.load("events", events[1000:])
    job.close()
    with caplog.at_level(logging.WARNING, logger="samza_dsl"):
        runner = LocalRunner(counter.app, config).run()
    try:
        assert any(str(victim) in r.getMessage() for r in caplog.records), \
            [r.getMessage() for r in caplog.records]
        assert _final_counts(runner.messages("counts")) == {
            k: v for k, v in _true_counts(events).items() if k in {e.key for e in events[1000:]}}
    finally:
        runner.close()


# -- checkpoints -----------------------------------------------------------------------------------

def test_commits_follow_task_commit_ms_and_end_of_stream(tmp_path: Path) -> None:
    config = {"job.dir": str(tmp_path / "job"), "task.commit.ms": 1}
    events = counter.sample_input(20000, ids=100)["events"]
    runner = LocalRunner(counter.app, config, inputs={"events": events}).run()
    try:
        assert runner.container is not None and runner.container.commits > 4  # timed + final
        cps = runner.job.checkpoints.tasks()
        ends = {p: runner.job.log_of("local").end_offset("events", p) for p in range(4)}
        got = {ssp.partition: off for offsets in cps.values() for ssp, off in offsets.items()}
        assert got == {p: end - 1 for p, end in ends.items()}
        changelogs = {task: runner.job.checkpoints.read_changelogs(task) for task in cps}
        assert all(cl.get("counts", 0) > 0 for cl in changelogs.values())
    finally:
        runner.close()


# -- bad input: serde error policies ---------------------------------------------------------------

def _json_app(name: str) -> tuple[StreamApplication, Any]:
    app = StreamApplication(name)
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=KVSerde(StringSerde(), JsonSerde()), partitions=1))
    out = app.output(local.output("out", serde=KVSerde(StringSerde(), JsonSerde()), partitions=1))
    inp.map(lambda kv: KV(kv.key, kv.value["n"] * 10), name="times-ten").send_to(out)
    return app, inp


def _load_with_garbage(app: StreamApplication, config: dict[str, Any]) -> None:
    job = LocalJob(app, config, run=False)
    try:
        log = job.log_of("local")
        log.append("in", 0, [(b"a", b'{"n": 1}', None), (b"b", b"{not json", None),
                             (b"c", b'{"n": 3}', None)])
    finally:
        job.close()


def test_serde_error_fail_names_stream_partition_offset(tmp_path: Path) -> None:
    app, _ = _json_app("bad-fail")
    config = {"job.dir": str(tmp_path / "job")}
    _load_with_garbage(app, config)
    runner = LocalRunner(app, config)
    with pytest.raises(SerdeError) as err:
        runner.run()
    runner.close()
    text = str(err.value)
    assert "'in'" in text and "partition 0" in text and "offset 1" in text
    assert "samza.serde.error" in text
    # nothing after the bad record was checkpointed past it
    job = LocalJob(app, config, run=False)
    try:
        cps = LocalCheckpoints(job.log_of("local"), job.job_name).tasks()
        assert all(off < 1 for offsets in cps.values() for off in offsets.values())
    finally:
        job.close()


def test_serde_error_skip_counts_and_goes_on(tmp_path: Path) -> None:
    app, _ = _json_app("bad-skip")
    config = {"job.dir": str(tmp_path / "job"), "streams.in.samza.serde.error": "skip"}
    _load_with_garbage(app, config)
    runner = LocalRunner(app, config).run()
    try:
        assert sorted(m.value for m in runner.messages("out")) == [10, 30]
        assert runner.metrics["serde-errors-skipped"] == 1
        assert runner.metrics["in.serde-errors-skipped"] == 1
        cps = runner.job.checkpoints.tasks()
        assert list(cps.values())[0] == {next(iter(list(cps.values())[0])): 2}
    finally:
        runner.close()
    again = LocalRunner(app, config).run()  # the bad record is behind the checkpoint
    try:
        assert again.metrics.snapshot().get("serde-errors-skipped", 0) == 0
    finally:
        again.close()


def test_serde_error_dead_letter_keeps_the_raw_record(tmp_path: Path) -> None:
    app, _ = _json_app("bad-dlq")
    config = {"job.dir": str(tmp_path / "job"), "streams.in.samza.serde.error": "dead-letter"}
    _load_with_garbage(app, config)
    runner = LocalRunner(app, config).run()
    try:
        assert sorted(m.value for m in runner.messages("out")) == [10, 30]
        log = runner.job.log_of("local")
        first, records = log.read(dead_letter_stream("bad-dlq-1"), 0, 0, 10)
        assert first == 0 and len(records) == 1
        key, value, headers = records[0]
        assert (key, value) == (b"b", b"{not json")
        hdrs = dict(headers or ())
        assert hdrs[SOURCE_HEADER] == b"in/0/1"
        assert b"json" in hdrs[ERROR_HEADER].lower()
    finally:
        runner.close()


def test_output_that_does_not_fit_its_serde_names_operator_and_offset(tmp_path: Path) -> None:
    app = StreamApplication("bad-out")
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=KVSerde(StringSerde(), JsonSerde()), partitions=1))
    out = app.output(local.output("out", serde=KVSerde(StringSerde(), JsonSerde()), partitions=1))
    inp.map(lambda kv: KV(kv.key, object()), name="bad").send_to(out)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")},
                         inputs={"in": [KV("a", {"n": 1})]})
    with pytest.raises(SamzaError) as err:
        runner.run()
    runner.close()
    text = str(err.value)
    assert "'out'" in text and "offset 0" in text


def test_no_kafka_streams_on_the_local_runner(tmp_path: Path) -> None:
    from samza_dsl.systems import KafkaSystem

    app = StreamApplication("mixed")
    local = LocalSystem("local")
    kafka = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9")
    app.input(local.input("in", partitions=1)).send_to(app.output(kafka.output("out")))
    with pytest.raises(SamzaError, match="Kafka"):
        LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()


def test_job_dir_default_is_under_the_working_directory(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = LocalRunner(counter.app, {}, inputs={"events": counter.sample_input(10)["events"]})
    runner.run().close()
    assert (tmp_path / ".samza" / "readwrite-counter-1" / "logs" / "local" / "data.mdb").exists()
    assert os.path.isdir(tmp_path / ".samza" / "readwrite-counter-1" / "stores" / "counts")


def test_keyed_output_round_trips_none_keys_and_tombstones(tmp_path: Path) -> None:
    # a bare message to a keyed output is an error: tests/runtime/test_type_mistakes.py
    app = StreamApplication("edge-kv")
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))
    out = app.output(local.output("out", serde=KVSerde(JsonSerde(), JsonSerde()), partitions=3))

    def shape(n: int) -> Any:
        return [KV(str(n), n), KV(str(n), None), KV(None, n), KV([n, n], n), KV(None, -n)][n % 5]

    inp.map(shape, name="shape").send_to(out)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"in": list(range(10))})
    runner.run()
    try:
        got = runner.messages("out")
        want = [shape(n) for n in range(10)]
        assert sorted(map(repr, got)) == sorted(map(repr, want))
        # keyed messages land in their key's partition, as Kafka's partitioner puts them
        from operators.hashing import partition_for

        log = runner.job.log_of("local")
        for p in range(3):
            for k, _v, _h in log.read("out", p, 0, 100)[1]:
                if k is not None:
                    assert partition_for(k, 3) == p
    finally:
        runner.close()


def test_window_state_with_struct_keys_on_lmdb(tmp_path: Path) -> None:
    from datetime import timedelta

    from samza_dsl import Windows

    app = StreamApplication("struct-keys")
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))
    out = app.output(local.output("out", serde=JsonSerde(), partitions=1))
    (inp.window(Windows.keyed_tumbling(lambda n: KV(n % 2, "k"), timedelta(seconds=10),
                                       init=lambda: 0, fold=lambda n, acc: acc + n),
                name="sum")
        .map(lambda pane: [pane.key.key.key, pane.message], name="flat")
        .send_to(out))
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"in": list(range(10))})
    runner.run()
    try:
        assert sorted(map(tuple, runner.messages("out"))) == [(0, 20), (1, 25)]
    finally:
        runner.close()


@pytest.mark.parametrize("fail_in", ["map", "send"])
def test_a_failure_in_the_batched_path_names_operator_and_offset(tmp_path: Path,
                                                                 fail_in: str) -> None:
    app = StreamApplication("batch-fail")
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))
    out = app.output(local.output("out", serde=KVSerde(StringSerde(), JsonSerde()), partitions=2))

    def f(n: int) -> Any:
        if n == 7:
            if fail_in == "map":
                raise ValueError("seven")
            return KV(str(n), object())  # JSON cannot write it
        return KV(str(n), n)

    inp.map(f, name="f").send_to(out)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"in": list(range(20))})
    with pytest.raises(SamzaError) as err:
        runner.run()
    runner.close()
    text = str(err.value)
    assert "offset 7" in text
    assert ("batch-fail-1-map-f" if fail_in == "map" else "send_to") in text


def test_the_batched_path_gives_what_the_general_path_gives(tmp_path: Path) -> None:
    """Filters, None results, tombstones and None keys mixed in one batch."""
    app = StreamApplication("batch-mix")
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))
    out = app.output(local.output("out", serde=KVSerde(StringSerde(), JsonSerde()), partitions=3))

    def f(n: int) -> Any:
        return [None, KV(str(n), n), KV(str(n), None), KV(None, n), KV(None, -n)][n % 5]

    inp.map(f, name="f").send_to(out)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"in": list(range(50))})
    runner.run()
    try:
        want = [r for r in map(f, range(50)) if r is not None]
        assert sorted(map(repr, runner.messages("out"))) == sorted(map(repr, want))
        assert runner.job.container.tasks[0]._batches  # the batched path ran
    finally:
        runner.close()


def test_a_failure_on_a_repeated_value_names_its_own_offset(tmp_path: Path) -> None:
    """Small ints decode to one shared object: the offset comes from the position, not the
    object."""
    app = StreamApplication("batch-repeat")
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))
    out = app.output(local.output("out", serde=KVSerde(StringSerde(), JsonSerde()), partitions=2))
    seen: list[int] = []

    def second_three_fails(n: int) -> Any:
        if n == 3 and 3 in seen:
            raise ValueError("the second 3")
        seen.append(n)
        return KV(str(n), n)

    inp.map(second_three_fails, name="f").send_to(out)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")},
                         inputs={"in": {0: [3, 1, 1, 3, 1]}})
    with pytest.raises(SamzaError, match="offset 3"):
        runner.run()
    runner.close()


def test_a_bad_store_setting_is_named(tmp_path: Path) -> None:
    from samza_dsl.errors import ConfigError

    # checked with the other config, before anything runs
    with pytest.raises(ConfigError, match="stores.counts.write.batch.size"):
        LocalRunner(counter.app, {"job.dir": str(tmp_path / "job"),
                                  "stores.counts.write.batch.size": "lots"},
                    inputs={"events": counter.sample_input(5)["events"]})
