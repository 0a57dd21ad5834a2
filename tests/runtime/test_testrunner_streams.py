"""TestRunner runs what the job runs (issue 62, point 1): its join placement checks fail a join
on the wrong key with the job's line, and its streams carry each message through their
declared serdes, so what a stage reads, and what fails to encode, is what the job on the
embedded local system reads and fails on. Each case runs on both and compares them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from two_runners import failure_on, run_on

from operators.hashing import partition_for
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import SerdeError, TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

JSON = KVSerde(StringSerde(), JsonSerde())
STRINGS = KVSerde(StringSerde(), StringSerde())
RUNNERS = ["test", "local"]


def run(runner: str, build: Any, inputs: dict[str, Any], tmp_path: Path) -> list[Any]:
    return run_on(runner, build, inputs, tmp_path)


def failure(runner: str, build: Any, inputs: dict[str, Any], tmp_path: Path) -> TaskError:
    return failure_on(runner, build, inputs, tmp_path, error=TaskError)


# -- a join_table on a key the stream is not partitioned by ---------------------------------------

def rekeyed_join(system: Any) -> StreamApplication:
    """Trips keyed by trip id, re-keyed by a ``map`` to their driver, looked up in a table of
    drivers filled from a side input of 4 partitions: the lookup key is not the key the trips
    are partitioned by."""
    app = StreamApplication("rides")
    trips = app.input(system.input("trips", serde=JSON, partitions=4))
    drivers = app.table("drivers", serde=JSON, side_inputs=[
        system.input("drivers-in", serde=JSON, partitions=4)], processor=lambda kv: [kv])
    (trips.map(lambda kv: KV(kv.value["driver"], kv.key), name="by-driver")
     .join_table(drivers, combine=lambda m, r: KV(m.key, [m.value, r and r.value]))
     .send_to(app.output(system.output("out", serde=JSON, partitions=4))))
    return app


def _misplaced_trip() -> KV[str, Any]:
    """Trip t0 of a driver whose key belongs to another partition than t0's: one message
    fails, so both runners fail on the same one."""
    home = partition_for(b"t0", 4)
    driver = next(f"d{i}" for i in range(100) if partition_for(f"d{i}".encode(), 4) != home)
    return KV("t0", {"driver": driver})


TRIPS = {"trips": [_misplaced_trip()],
         "drivers-in": [KV(f"d{i}", f"driver {i}") for i in range(7)]}


def test_a_join_table_on_a_re_keyed_stream_fails_the_same_on_both(tmp_path: Path) -> None:
    errors = [failure(r, rekeyed_join, TRIPS, tmp_path) for r in RUNNERS]
    test, local = (str(e) for e in errors)
    assert "belongs to partition" in test and "Repartition the stream" in test, test
    assert test == local


def test_messages_given_by_partition_are_checked_where_the_test_put_them(
        tmp_path: Path) -> None:
    """``{partition: [...]}`` is a topic produced that way: a key in another partition than its
    own fails the lookup as it fails the job reading such a topic."""
    app = StreamApplication("by-hand")
    mem = MemorySystem()
    orders = app.input(mem.input("orders", serde=JSON, partitions=4))
    users = app.table("users", serde=JSON, side_inputs=[mem.input("users-in", serde=JSON,
                                                                   partitions=4)],
                      processor=lambda kv: [kv])
    (orders.join_table(users, combine=lambda m, r: KV(m.key, [m.value, r and r.value]))
     .send_to(app.output(mem.output("out", serde=JSON, partitions=4))))
    runner = TestRunner(app).add_input("orders", {p: [KV(f"u{p}", p)] for p in range(4)})
    with pytest.raises(TaskError, match="belongs to partition"):
        runner.add_input("users-in", [KV("u1", "one")]).run(timeout=120)


# -- what the stages read ------------------------------------------------------------------------

def tuple_through_partition_by(system: Any) -> StreamApplication:
    """A tuple value through a ``partition_by`` under ``JsonSerde``; the next stage says what
    it read."""
    app = StreamApplication("tuples")
    ins = app.input(system.input("in", serde=JSON, partitions=2))
    (ins.partition_by(lambda kv: kv.key, lambda kv: (kv.value, 1), serde=JSON, name="by-key")
     .map(lambda kv: KV(kv.key, [type(kv.value).__name__, kv.value]), name="seen")
     .send_to(app.output(system.output("out", serde=JSON, partitions=2))))
    return app


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_tuple_through_a_json_partition_by_reads_as_a_list(runner: str,
                                                              tmp_path: Path) -> None:
    out = run(runner, tuple_through_partition_by, {"in": [KV("a", "x"), KV("b", "y")]},
              tmp_path)
    assert sorted(out, key=lambda kv: kv.key) == [KV("a", ["list", ["x", 1]]),
                                                  KV("b", ["list", ["y", 1]])]


def tuple_to_output(system: Any) -> StreamApplication:
    app = StreamApplication("tuple-out")
    ins = app.input(system.input("in", serde=JSON, partitions=1))
    ins.map(lambda kv: KV(kv.key, (kv.value, 2))).send_to(
        app.output(system.output("out", serde=JSON, partitions=1)))
    return app


@pytest.mark.parametrize("runner", RUNNERS)
def test_an_output_reads_as_a_consumer_with_its_serde_reads_it(runner: str,
                                                                tmp_path: Path) -> None:
    assert run(runner, tuple_to_output, {"in": [KV("a", "x")]}, tmp_path) == [
        KV("a", ["x", 2])]


# -- what fails to encode ------------------------------------------------------------------------

def int_to_string_output(system: Any) -> StreamApplication:
    app = StreamApplication("lengths")
    ins = app.input(system.input("in", serde=STRINGS, partitions=1))
    ins.map(lambda kv: KV(kv.key, len(kv.value)), name="length").send_to(
        app.output(system.output("out", serde=STRINGS, partitions=1)))
    return app


def test_an_output_value_its_serde_cannot_encode_fails_the_same_on_both(
        tmp_path: Path) -> None:
    test, local = (failure(r, int_to_string_output, {"in": [KV("a", "xyz")]}, tmp_path)
                   for r in RUNNERS)
    assert "cannot serialize a message for stream 'out'" in str(test), str(test)
    assert str(test) == str(local)
    assert (test.stream, test.partition, test.offset) == ("in", 0, 0)


def int_through_partition_by(system: Any) -> StreamApplication:
    app = StreamApplication("ints")
    ins = app.input(system.input("in", serde=STRINGS, partitions=1))
    (ins.partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=KVSerde(
        StringSerde(), JsonSerde()), name="by-key")
     .map(lambda kv: KV(kv.key, len(kv.value)), name="length")
     .partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=STRINGS, name="again")
     .send_to(app.output(system.output("out", serde=STRINGS, partitions=1))))
    return app


def test_an_intermediate_value_its_serde_cannot_encode_fails_the_same_on_both(
        tmp_path: Path) -> None:
    test, local = (failure(r, int_through_partition_by, {"in": [KV("a", "xyz")]}, tmp_path)
                   for r in RUNNERS)
    assert "cannot" in str(test) and "StringSerde" in str(test), str(test)
    # the job's line also names the input message the record after the hop was written for,
    # and that its --skip passes over the replays' copies (records of a system that stores
    # streams carry their origin; TestRunner's do not: nothing replays there)
    origin = " (written for the message at stream 'in' partition 0 offset 0)"
    copies = ", and so the copies of it that a replay writes again"
    assert origin in str(local) and copies in str(local), str(local)
    assert str(test) == str(local).replace(origin, "").replace(copies, "")


def test_an_input_message_its_serde_cannot_encode_fails_naming_the_input_and_offset() -> None:
    """A message no producer could have written fails the run before any stage reads it,
    naming the input, its partition and offset, as given in a list or by partition."""
    app = int_to_string_output(MemorySystem())
    for given in ([KV("a", "x"), KV("b", 5)], {0: [KV("a", "x"), KV("b", 5)]}):
        with pytest.raises(SerdeError) as info:
            TestRunner(app).add_input("in", given).run(timeout=60)
        text = str(info.value)
        assert "\n" not in text
        assert "input 'in': the message at partition 0 offset 1 cannot be encoded" in text, text
        assert "StringSerde() cannot encode int 5" in text, text
        assert (info.value.stream, info.value.partition, info.value.offset) == ("in", 0, 1)


def test_an_input_given_with_a_serde_is_read_decoded() -> None:
    """A tuple given to a JSON input reads as the list a consumer of the topic reads."""
    app = StreamApplication("given")
    mem = MemorySystem()
    ins = app.input(mem.input("in", serde=JSON, partitions=1))
    ins.map(lambda kv: KV(kv.key, type(kv.value).__name__)).send_to(
        app.output(mem.output("out", partitions=1)))
    assert TestRunner(app).add_input("in", [KV("a", (1, 2))]).run(timeout=60).messages(
        "out") == [KV("a", "list")]


# -- what fails to decode ------------------------------------------------------------------------

def capped(system: Any) -> StreamApplication:
    """An input whose serde takes values of up to 16 bytes, under ``dead-letter``."""
    app = StreamApplication("capped", config={"streams.in.samza.serde.error": "dead-letter"})
    ins = app.input(system.input("in", serde=KVSerde(StringSerde(), JsonSerde(max_bytes=16)),
                                 partitions=1))
    ins.send_to(app.output(system.output("out", serde=JSON, partitions=1)))
    return app


def test_a_record_its_serde_cannot_decode_goes_to_the_dead_letters_on_both(
        tmp_path: Path) -> None:
    given = {"in": [KV("a", "short"), KV("b", "x" * 40), KV("c", "fine")]}
    test = TestRunner(capped(MemorySystem())).add_input("in", given["in"]).run(timeout=60)
    assert test.messages("out") == run("local", capped, given, tmp_path) == [
        KV("a", "short"), KV("c", "fine")]
    [letter] = test.dead_letters
    assert letter["source"] == "in/0/1" and letter["key"] == "b"
    assert letter["value"] == b'"' + b"x" * 40 + b'"'
    assert "more than the 16 bytes a message may take" in letter["error"]
    assert test.counter("in.serde-errors-skipped") == 1
