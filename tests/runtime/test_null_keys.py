"""Null keys and values, decided as in Samza and the same on TestRunner and the embedded local
system (docs/semantics.md, "Samza itself"; tests/spark/test_spark_null_keys.py runs them on
Spark): a None key into a table (``send_to`` or a side input) fails the message, as Samza's
stores refuse one ("Null is not a valid key"); so does a key the table's key serde cannot
serialize (an int on a ``StringSerde`` table), written or looked up, as the LMDB store refuses
it; a None value through ``partition_by`` fails, as Samza cannot serialize one ("can not
serialize the message"). Each fails with the same line on both runners, naming the operator,
the table or stream, and the stream, partition and offset the message came from. A None key
in ``join_table`` is a miss and a None value to an output passes (a tombstone), as in Samza."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from two_runners import failure_on, run_on

from samza_dsl import KV, StreamApplication
from samza_dsl.errors import TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde

SERDE = KVSerde(StringSerde(), JsonSerde())
#: the key each input key becomes before the table
REKEYED = {"none": None, "five": 5}


def rekey(kv: KV[str, Any]) -> KV[Any, Any]:
    return KV(REKEYED.get(kv.key, kv.key), kv.value)


def sent(system: Any) -> StreamApplication:
    """``send_to(table)`` of the re-keyed input, and a lookup of the input's own keys."""
    app = StreamApplication("sent")
    ins = app.input(system.input("in", serde=SERDE, partitions=1))
    table = app.table("t", serde=SERDE, changelog=False)
    ins.map(rekey, name="rekey").send_to(table)
    (ins.join_table(table, combine=lambda m, r: KV(m.key, [m.value, r and r.value]))
     .send_to(app.output(system.output("out", serde=SERDE, partitions=1))))
    return app


def side(system: Any) -> StreamApplication:
    """A table filled by a side input whose processor re-keys."""
    app = StreamApplication("side")
    ins = app.input(system.input("in", serde=SERDE, partitions=1))
    table = app.table("t", serde=SERDE, side_inputs=[system.input("side", serde=SERDE,
                                                                   partitions=1)],
                      processor=lambda kv: [rekey(kv)])
    (ins.join_table(table, combine=lambda m, r: KV(m.key, [m.value, r and r.value]))
     .send_to(app.output(system.output("out", serde=SERDE, partitions=1))))
    return app


def looked_up(system: Any) -> StreamApplication:
    """A lookup under the re-keyed key in a table the input's own keys fill."""
    app = StreamApplication("looked")
    ins = app.input(system.input("in", serde=SERDE, partitions=1))
    table = app.table("t", serde=SERDE, changelog=False)
    ins.send_to(table)
    (ins.join_table(table, key=lambda kv: REKEYED.get(kv.key, kv.key),
                    combine=lambda m, r: KV(m.key, [m.value, r and r.value]), name="look")
     .send_to(app.output(system.output("out", serde=SERDE, partitions=1))))
    return app


def repartitioned(system: Any) -> StreamApplication:
    """``partition_by`` with a value function that gives None for the value "gone"."""
    app = StreamApplication("pb")
    ins = app.input(system.input("in", serde=SERDE, partitions=1))
    (ins.partition_by(lambda kv: kv.key, lambda kv: None if kv.value == "gone" else kv.value,
                      serde=SERDE, name="by-key")
     .send_to(app.output(system.output("out", serde=SERDE, partitions=1))))
    return app


def run(runner: str, build: Any, inputs: dict[str, list[Any]], tmp_path: Path) -> list[Any]:
    return run_on(runner, build, inputs, tmp_path)


def failure(runner: str, build: Any, inputs: dict[str, list[Any]], tmp_path: Path) -> TaskError:
    return failure_on(runner, build, inputs, tmp_path, error=TaskError)


RUNNERS = ["test", "local"]
NULL_KEY = ("the key of KV(key=None, value='p1') is None, and a table holds no None key (as in "
            "Samza); filter such messages out or give them a key before the send_to")
INT_KEY = ("table 't': cannot serialize a key (StringSerde() cannot encode int 5: expected str. "
           "Map the message to a str first or use JsonSerde); give the table a serde that fits, "
           "or map the key to one it takes first")


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_none_key_sent_to_a_table_fails_the_message_naming_the_table_and_its_origin(
        runner: str, tmp_path: Path) -> None:
    err = failure(runner, sent, {"in": [KV("a", "x"), KV("none", "p1")]}, tmp_path)
    assert NULL_KEY in str(err)
    assert "send_to table 't' (sent-1-send_to-" in str(err)
    assert (err.stream, err.partition, err.offset) == ("in", 0, 1)
    assert "on stream 'in' partition 0 offset 1" in str(err)


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_none_key_from_a_side_input_fails_naming_the_side_input(runner: str,
                                                                   tmp_path: Path) -> None:
    err = failure(runner, side, {"in": [KV("a", "x")], "side": [KV("a", "s"), KV("none", "p1")]},
                  tmp_path)
    assert NULL_KEY in str(err) and "(for a side input, in its processor)" in str(err)
    assert (err.stream, err.partition, err.offset) == ("side", 0, 1)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("build,inputs", [
    (sent, {"in": [KV("a", "x"), KV("five", "p1")]}),
    (side, {"in": [KV("a", "x")], "side": [KV("a", "s"), KV("five", "p1")]}),
    (looked_up, {"in": [KV("a", "x"), KV("five", "p1")]}),
], ids=["send_to", "side-input", "join_table"])
def test_a_key_the_tables_serde_cannot_serialize_fails_as_the_store_would(
        runner: str, build: Any, inputs: dict[str, list[Any]], tmp_path: Path) -> None:
    err = failure(runner, build, inputs, tmp_path)
    assert INT_KEY in str(err)
    stream = "side" if build is side else "in"
    assert (err.stream, err.partition, err.offset) == (stream, 0, 1)
    if build is looked_up:
        assert err.op_id == "looked-1-join_table-look"


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_none_value_through_partition_by_fails_naming_the_operator_and_origin(
        runner: str, tmp_path: Path) -> None:
    err = failure(runner, repartitioned, {"in": [KV("a", "x"), KV("b", "gone")]}, tmp_path)
    assert ("partition_by 'pb-1-partition_by-by-key': the value for KV(key='b', value='gone') "
            "is None, and an intermediate stream 'pb-1-partition_by-by-key' carries no None "
            "value (as in Samza)") in str(err)
    assert (err.op_id, err.stream, err.partition, err.offset) == (
        "pb-1-partition_by-by-key", "in", 0, 1)


def passed(system: Any) -> StreamApplication:
    app = StreamApplication("passed")
    (app.input(system.input("in", serde=SERDE, partitions=1))
     .send_to(app.output(system.output("out", serde=SERDE, partitions=1))))
    return app


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_none_key_looked_up_is_a_miss_and_a_none_value_reaches_an_output(
        runner: str, tmp_path: Path) -> None:
    """As in Samza: ``join_table`` skips a None key's lookup; an output takes a None value (a
    tombstone on a compacted Kafka topic)."""
    out = run(runner, looked_up, {"in": [KV("a", "x"), KV("none", "y")]}, tmp_path)
    assert out == [KV("a", ["x", "x"]), KV("none", ["y", None])]
    assert run(runner, passed, {"in": [KV("a", None)]}, tmp_path / "p") == [KV("a", None)]


def joined(system: Any) -> StreamApplication:
    """A stream-stream join whose left key is None for the value "gone"."""
    from datetime import timedelta

    app = StreamApplication("joined")
    left = app.input(system.input("in", serde=SERDE, partitions=1))
    right = app.input(system.input("side", serde=SERDE, partitions=1))
    (left.join(right, key=lambda kv: None if kv.value == "gone" else kv.key,
               other_key=lambda kv: kv.key, combine=lambda a, b: KV(a.key, [a.value, b.value]),
               ttl=timedelta(hours=1), name="j")
     .send_to(app.output(system.output("out", serde=SERDE, partitions=1))))
    return app


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_none_join_key_fails_naming_the_join_and_side(runner: str, tmp_path: Path) -> None:
    """As before this decision, and as in Samza, whose join stores refuse a null key."""
    err = failure(runner, joined, {"in": [KV("a", "x"), KV("b", "gone")], "side": [KV("a", "y")]},
                  tmp_path)
    assert ("join 'joined-1-join-j': the left key of KV(key='b', value='gone') is None; a join "
            "needs a key on both sides (as in Samza)") in str(err)
    assert (err.stream, err.partition, err.offset) == ("in", 0, 1)
