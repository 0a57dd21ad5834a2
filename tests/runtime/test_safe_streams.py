"""Intermediate streams and window and join state on the local log: their default serde carries
Python values faithfully, and a pickle payload written to them is data, never code: it meets the
stream's ``serde.error`` policy."""

from __future__ import annotations

import datetime as dt
import os
import pickle
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from operators.state import encode_key
from runtime import LocalRunner
from runtime.engine.codec import ERROR_HEADER, SOURCE_HEADER
from runtime.local.system import LocalJob, dead_letter_stream
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.errors import SamzaError, SerdeError, TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, SafeSerde
from samza_dsl.systems import LocalSystem


class Evil:
    """Runs ``touch marker`` when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def evil_payload(marker: Path) -> bytes:
    payload = pickle.dumps(Evil(marker))
    pickle.loads(payload)  # it does run code when unpickled: the test means something
    assert marker.exists()
    marker.unlink()
    return payload


# -- an intermediate stream --------------------------------------------------------------------

def repartition_app(name: str) -> StreamApplication:
    app = StreamApplication(name)
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))
    out = app.output(local.output("out", serde=JsonSerde(), partitions=1))
    (inp.partition_by(lambda m: m["user"], name="by-user")
        .map(lambda kv: [kv.key, kv.value["n"]], name="flat")
        .send_to(out))
    return app


def load_with_payload(app: StreamApplication, config: dict[str, Any], payload: bytes) -> str:
    """Inputs, and the payload first in the intermediate stream; returns its stream id."""
    job = LocalJob(app, config, run=False)
    try:
        sid = next(iter(job.plan.intermediate_streams))
        job.load("in", [{"user": "u1", "n": 1}, {"user": "u2", "n": 2}])
        good_key = SafeSerde().serialize("u9")
        job.log_of("local").append(job.physical[sid], 0, [(good_key, payload, None)])
        return sid
    finally:
        job.close()


def test_pickle_on_an_intermediate_stream_fails_the_job_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    app = repartition_app("evil-fail")
    config = {"job.dir": str(tmp_path / "job")}
    sid = load_with_payload(app, config, evil_payload(marker))
    runner = LocalRunner(app, config)
    with pytest.raises(SerdeError) as err:
        runner.run()
    runner.close()
    text = str(err.value)
    assert repr(sid) in text and "partition 0" in text and "offset 0" in text
    assert f"streams.{sid}.samza.serde.error" in text
    assert not marker.exists()


def test_pickle_on_an_intermediate_stream_is_skipped(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    app = repartition_app("evil-skip")
    config: dict[str, Any] = {"job.dir": str(tmp_path / "job")}
    sid = load_with_payload(app, config, evil_payload(marker))
    config[f"streams.{sid}.samza.serde.error"] = "skip"
    runner = LocalRunner(app, config).run()
    try:
        assert sorted(map(tuple, runner.messages("out"))) == [("u1", 1), ("u2", 2)]
        assert runner.metrics["serde-errors-skipped"] == 1
    finally:
        runner.close()
    assert not marker.exists()


def test_pickle_on_an_intermediate_stream_goes_to_the_dead_letters(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    app = repartition_app("evil-dlq")
    config: dict[str, Any] = {"job.dir": str(tmp_path / "job")}
    payload = evil_payload(marker)
    sid = load_with_payload(app, config, payload)
    config[f"streams.{sid}.samza.serde.error"] = "dead-letter"
    runner = LocalRunner(app, config).run()
    try:
        assert sorted(map(tuple, runner.messages("out"))) == [("u1", 1), ("u2", 2)]
        _, records = runner.job.log_of("local").read(dead_letter_stream("evil-dlq-1"), 0, 0, 10)
        assert len(records) == 1 and records[0][1] == payload
        headers = dict(records[0][2] or ())
        assert headers[SOURCE_HEADER] == f"{runner.job.physical[sid]}/0/0".encode() or \
            headers[SOURCE_HEADER] == f"{sid}/0/0".encode()
        assert ERROR_HEADER in headers
    finally:
        runner.close()
    assert not marker.exists()


# -- a changelog being restored ----------------------------------------------------------------

def window_app(name: str) -> StreamApplication:
    app = StreamApplication(name)
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))
    out = app.output(local.output("out", serde=JsonSerde(), partitions=1))
    (inp.window(Windows.keyed_tumbling(lambda m: m["user"], timedelta(seconds=10),
                                       init=lambda: 0, fold=lambda m, n: n + m["n"],
                                       event_time=lambda m: m["ts"]), name="sum")
        .map(lambda pane: [pane.key.key, pane.message], name="flat")
        .send_to(out))
    return app


def poisoned_changelog(app: StreamApplication, config: dict[str, Any], payload: bytes
                       ) -> tuple[str, int]:
    """Runs the window job, puts the payload in its changelog before the checkpointed offset (a
    later run covers it), and loses the local stores, so the next run rebuilds them from the
    changelog. Returns the changelog stream and the payload's offset."""
    # a window still open at the end (ts far apart, no end-of-stream close on a follow-up)
    runner = LocalRunner(app, config, inputs={"in": [{"user": "u1", "n": 1, "ts": 1.0}]}).run()
    try:
        spec = runner.job.plan.stores[next(iter(runner.job.plan.stores))]
        stream = str(spec.changelog).partition(".")[2]
        log = runner.job.log_of("local")
        offset = log.end_offset(stream, 0)
        log.append(stream, 0, [(encode_key((0, "u7")), payload, None)])
    finally:
        runner.close()
    job = LocalJob(app, config, run=False)
    job.load("in", [{"user": "u2", "n": 2, "ts": 2.0}])
    job.close()
    LocalRunner(app, config).run().close()  # its checkpoint moves past the payload
    shutil.rmtree(Path(config["job.dir"]) / "stores")
    return stream, offset


def test_pickle_in_a_changelog_fails_the_restore_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    app = window_app("cl-fail")
    config: dict[str, Any] = {"job.dir": str(tmp_path / "job")}
    stream, offset = poisoned_changelog(app, config, evil_payload(marker))
    runner = LocalRunner(app, config)
    with pytest.raises(SamzaError) as err:
        runner.run()
    runner.close()
    text = str(err.value)
    assert repr(stream) in text and "partition 0" in text and f"offset {offset}" in text
    assert f"streams.{stream}.samza.serde.error" in text
    assert not marker.exists()


@pytest.mark.parametrize("policy", ["skip", "dead-letter"])
def test_pickle_in_a_changelog_meets_its_policy(tmp_path: Path, policy: str) -> None:
    marker = tmp_path / "pwned"
    app = window_app(f"cl-{policy}")
    config: dict[str, Any] = {"job.dir": str(tmp_path / "job")}
    payload = evil_payload(marker)
    stream, offset = poisoned_changelog(app, config, payload)
    config[f"streams.{stream}.samza.serde.error"] = policy
    runner = LocalRunner(app, config).run()
    try:
        assert {i["mode"] for i in runner.job.state.restores.values()} == {"rebuilt"}
        assert runner.metrics["serde-errors-skipped"] == 1
        _, dead = runner.job.log_of("local").read(dead_letter_stream(f"cl-{policy}-1"), 0, 0, 10)
        if policy == "dead-letter":
            assert [r[1] for r in dead] == [payload]
            assert dict(dead[0][2] or ())[SOURCE_HEADER] == f"{stream}/0/{offset}".encode()
        else:
            assert dead == []
    finally:
        runner.close()
    assert not marker.exists()


# -- faithful values through partition_by, windows and joins -------------------------------------

class Visit(msgspec.Struct, frozen=True):
    user: str
    at: dt.datetime
    path: tuple[str, ...]


def typed_app(name: str, declare: bool = True) -> StreamApplication:
    """Tuples, datetimes, KV and a declared Struct through partition_by, a window that collects
    its messages, and a join; an operator checks the types it gets."""
    app = StreamApplication(name)
    if declare:
        app.declare_types(Visit)
    local = LocalSystem("local")
    serde = SafeSerde(types=[Visit])
    inp = app.input(local.input("in", serde=serde, partitions=1))
    out = app.output(local.output("out", serde=KVSerde(serde, serde), partitions=1))

    def check(kv: KV[Any, Any]) -> KV[Any, Any]:
        assert type(kv.key) is tuple and type(kv.value) is tuple, kv
        assert type(kv.value[0]) is Visit and type(kv.value[1]) is KV, kv
        assert type(kv.value[0].at) is dt.datetime
        return kv

    by_user = (inp.partition_by(lambda m: (m[0].user, m[0].at.date().isoformat()),
                                lambda m: (m[0], KV(m[1], m[0].at)), name="by-user")
               .map(check, name="check"))
    panes = by_user.window(Windows.keyed_tumbling(
        lambda kv: kv.key, timedelta(hours=1), event_time=lambda kv: kv.value[0].at.timestamp()),
        name="collect")
    (panes.map(lambda pane: KV(pane.key.key, tuple(kv.value for kv in pane.message)),
               name="pane")
        .send_to(out))
    return app


def visits() -> list[Any]:
    base = dt.datetime(2024, 5, 1, 8, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    return [(Visit(f"u{i % 3}", base + dt.timedelta(minutes=7 * i), ("home", str(i))),
             KV(i, {"seen": [i, (i, i)]})) for i in range(20)]


def test_typed_values_on_the_local_log_equal_the_in_memory_run(tmp_path: Path) -> None:
    app = typed_app("typed")
    expected = TestRunner(app).add_input("in", visits()).run().messages("out")
    assert expected
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"in": visits()}).run()
    try:
        got = runner.messages("out")
    finally:
        runner.close()

    # a datetime inside a Struct comes back as the same instant (msgspec writes it in UTC)
    assert sorted(got, key=lambda m: m.key) == sorted(expected, key=lambda m: m.key)
    assert all(type(m.key) is tuple and type(m.value[0][0]) is Visit for m in got)


def test_an_undeclared_struct_on_an_intermediate_stream_names_stream_operator_type(
        tmp_path: Path) -> None:
    app = typed_app("untyped", declare=False)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"in": visits()})
    with pytest.raises(TaskError) as err:
        runner.run()
    runner.close()
    text = str(err.value)
    assert "untyped-1-partition_by-by-user" in text  # the operator and its stream
    assert "Visit" in text and "declare" in text


def test_state_that_cannot_be_written_names_store_operator_and_type(tmp_path: Path) -> None:
    from runtime.state.codec import state_codec
    from runtime.state.lmdb_store import LmdbStore

    class Acc(msgspec.Struct):
        n: int

    ke, kd, ve, vd = state_codec({}, "window state 'w' of operator 'app-1-window-w'")
    store = LmdbStore.open(tmp_path / "s", name="w", task="Partition 0", key_encode=ke,
                           key_decode=kd, value_encode=ve, value_decode=vd)
    try:
        store.put((0, "k"), (1, [Acc(1)]))
        with pytest.raises(SerdeError) as err:
            store.flush()
        text = str(err.value)
        assert "'app-1-window-w'" in text and "store 'w'" in text
        assert "Acc" in text and "declare" in text
        store.put((0, "k"), (1, [KV("a", dt.date(2024, 1, 1))]))
        store.put(KV("struct", "key"), {"x": (1, 2)})
        store.flush()
        assert [(k, v) for k, v in store.all()] == [
            ((0, "k"), (1, [KV("a", dt.date(2024, 1, 1))])), (KV("struct", "key"), {"x": (1, 2)})]
    finally:
        store.close()


def test_a_stored_pickle_is_never_loaded_and_the_error_names_the_store(tmp_path: Path) -> None:
    """State written by an older version (pickled values in the local LMDB file) fails to
    decode with an error naming the store and what to do; nothing runs."""
    from runtime.state.codec import state_codec
    from runtime.state.lmdb_store import LmdbStore

    marker = tmp_path / "pwned"
    payload = evil_payload(marker)
    raw = LmdbStore.open(tmp_path / "s", name="w", task="Partition 0", key_encode=encode_key,
                         key_decode=lambda b: b, value_encode=lambda v: v,
                         value_decode=lambda b: b)
    raw.put((0, "k"), payload)
    raw.flush()
    raw.close()
    ke, kd, ve, vd = state_codec({}, "window state 'w'")
    store = LmdbStore.open(tmp_path / "s", name="w", task="Partition 0", key_encode=ke,
                           key_decode=kd, value_encode=ve, value_decode=vd)
    try:
        for read in (lambda: store.get((0, "k")), lambda: list(store.all())):
            with pytest.raises(SerdeError) as err:
                read()
            assert "store 'w'" in str(err.value) and "reset" in str(err.value)
    finally:
        store.close()
    assert not marker.exists()


def test_join_state_keeps_tuples_datetimes_and_structs(tmp_path: Path) -> None:
    app = StreamApplication("typed-join")
    app.declare_types(Visit)
    local = LocalSystem("local")
    serde = SafeSerde(types=[Visit])
    left = app.input(local.input("left", serde=serde, partitions=1))
    right = app.input(local.input("right", serde=serde, partitions=1))
    out = app.output(local.output("out", serde=serde, partitions=1))
    (left.join(right, key=lambda m: m[0], other_key=lambda m: m[0],
               combine=lambda a, b: (a[0], a[1], b[1], type(a[1]).__name__,
                                     type(b[1]).__name__),
               ttl=timedelta(hours=1), name="pair")
        .send_to(out))
    at = dt.datetime(2024, 5, 1, 8, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    lefts = [((i, "k"), Visit(f"u{i}", at, ("a", str(i)))) for i in range(5)]
    rights = [((i, "k"), (at + dt.timedelta(days=i), KV(i, {i}))) for i in range(5)]
    expected = TestRunner(app).add_input("left", lefts).add_input("right", rights).run() \
        .messages("out")
    assert len(expected) == 5
    # the left side in one run; the right side in the next, after the stores were lost: the
    # join reads the left messages back from the state its changelog rebuilt
    config = {"job.dir": str(tmp_path / "job")}
    LocalRunner(app, config, inputs={"left": lefts}).run().close()
    shutil.rmtree(tmp_path / "job" / "stores")
    job = LocalJob(app, config, run=False)
    job.load("right", rights)
    job.close()
    runner = LocalRunner(app, config).run()
    try:
        got = runner.messages("out")
        assert "rebuilt" in {i["mode"] for i in runner.job.state.restores.values()}
    finally:
        runner.close()
    assert sorted(got) == sorted(expected)
    assert {m[3:] for m in got} == {("Visit", "tuple")}
    assert all(m[2][0].utcoffset() == dt.timedelta(hours=-5) for m in got)
