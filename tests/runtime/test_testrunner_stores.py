"""TestRunner's stores encode and decode as the job's do (issue 62, point 1): window and join
state through ``SafeSerde`` with the application's declared types, tables through their
``KVSerde``, each written out at a flush (at commit, once a write batch is full, before a
``range`` or ``all``) and decoded where it is read back. What fails in the job's LMDB store
fails in TestRunner's in-memory store with the same line (but for where the store is: a
directory, or "in memory"), and what the job reads back TestRunner reads back: each case runs
one application on TestRunner and on ``LocalRunner`` (the embedded local system)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from two_runners import failure_on, run_on

from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem
from samza_dsl.windows import Windows

SERDE = KVSerde(StringSerde(), JsonSerde())
RUNNERS = ["test", "local"]


@dataclass
class Tally:
    """A class the application does not declare (``app.declare_types``)."""

    n: int


def undeclared_fold(system: Any) -> StreamApplication:
    """A window whose fold keeps a ``Tally``, which window state cannot encode undeclared:
    its panes reach the store at a commit before the window closes (``COMMIT_OFTEN``)."""
    app = StreamApplication("tally")
    ins = app.input(system.input("in", serde=SERDE, partitions=1))
    (ins.window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
                                       init=lambda: Tally(0),
                                       fold=lambda kv, t: Tally(t.n + 1),
                                       event_time=lambda kv: 1000.0 + kv.value), name="per-key")
     .map(lambda pane: KV(pane.key.key, pane.message.n), name="n")
     .send_to(app.output(system.output("out", serde=SERDE, partitions=1))))
    return app


#: commits while the window is open, so that its panes are written to its store
COMMIT_OFTEN = {"task.commit.ms": "1"}
#: what ``undeclared_join`` joins: commits (``COMMIT_OFTEN``) come while the join holds Tallies
JOINED = {"in": [KV("k", i) for i in range(20_000)], "other": [KV("k", 3)]}


def _seconds(kv: KV[str, Any]) -> float:
    """The event time of a message of ``undeclared_join``: its int value, or the ``Tally``'s the
    left side's ``map`` makes of it (a join reads the input's event time from the message as it
    reaches it)."""
    return float(kv.value.n if isinstance(kv.value, Tally) else kv.value)


def undeclared_join(system: Any) -> StreamApplication:
    """A stream-stream join (in event time, which every runner runs alike) keeping ``Tally``
    messages, which join state cannot encode."""
    app = StreamApplication("tj")
    ins = app.input(system.input("in", serde=SERDE, partitions=1, event_time=_seconds))
    other = app.input(system.input("other", serde=SERDE, partitions=1, event_time=_seconds))
    (ins.map(lambda kv: KV(kv.key, Tally(kv.value)), name="tally")
     .join(other, key=lambda kv: kv.key, other_key=lambda kv: kv.key,
           combine=lambda m, o: KV(m.key, m.value.n), within=timedelta(seconds=60), name="j")
     .send_to(app.output(system.output("out", serde=SERDE, partitions=1))))
    return app


class PairsRead:
    """A function that writes a tuple for each message's key into ``ctx.table("t")`` and gives
    what the table's ``range`` reads back then, written out (``repr``) so that the output's
    own serde changes nothing of it."""

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("t")

    def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
        self.table.put(kv.key, (kv.value, "seen"))
        return KV(kv.key, repr(list(self.table.range("a", "z"))))


def tuple_values(system: Any) -> StreamApplication:
    """A table of ``JsonSerde`` values written as tuples, and read back by ``range``."""
    app = StreamApplication("tuples")
    ins = app.input(system.input("in", serde=SERDE, partitions=1))
    app.table("t", serde=SERDE, changelog=False)
    ins.map(PairsRead(), name="pairs").send_to(
        app.output(system.output("out", serde=SERDE, partitions=1)))
    return app


class Writer:
    """A function that writes ``ctx.table("t")`` itself: key and value as ``KEY`` and ``VALUE``
    make them of the message."""

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("t")

    def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
        self.table.put(KEY.get(kv.key, kv.key), VALUE.get(kv.value, kv.value))
        return kv


KEY = {"five": 5}
VALUE = {"complex": 1j}


def context_writer(system: Any) -> StreamApplication:
    app = StreamApplication("writer")
    ins = app.input(system.input("in", serde=SERDE, partitions=1))
    app.table("t", serde=SERDE, changelog=False)
    ins.map(Writer(), name="write").send_to(
        app.output(system.output("out", serde=SERDE, partitions=1)))
    return app


def run(runner: str, build: Any, inputs: dict[str, list[Any]], tmp_path: Path,
        config: dict[str, Any] | None = None) -> list[Any]:
    return run_on(runner, build, inputs, tmp_path, config)


def failure(runner: str, build: Any, inputs: dict[str, list[Any]], tmp_path: Path,
            config: dict[str, Any] | None = None) -> str:
    """The run's one-line error, with where the store is (a directory, or in memory) left out."""
    text = str(failure_on(runner, build, inputs, tmp_path, config))
    assert ("in memory" if runner == "test" else f"at {tmp_path}") in text
    return re.sub(r" (at \S+|in memory):", ":", text)


def both_fail(build: Any, inputs: dict[str, list[Any]], tmp_path: Path,
              config: dict[str, Any] | None = None) -> str:
    test, local = (failure(r, build, inputs, tmp_path / r, config) for r in RUNNERS)
    assert test == local
    return test


def test_a_window_fold_of_an_undeclared_class_fails_on_both_with_the_same_line(
        tmp_path: Path) -> None:
    inputs = {"in": [KV("k", i % 5) for i in range(20_000)]}
    line = both_fail(undeclared_fold, inputs, tmp_path, COMMIT_OFTEN)
    assert ("store 'tally-1-window-per-key' of task 'Partition 0': cannot encode the entry for "
            "key (1000000, 'k')") in line
    assert ("window state 'tally-1-window-per-key' of operator 'tally-1-window-per-key': "
            "SafeSerde() cannot write a value of type Tally") in line


def test_a_join_keeping_an_undeclared_class_fails_on_both_with_the_same_line(
        tmp_path: Path) -> None:
    line = both_fail(undeclared_join, JOINED, tmp_path, COMMIT_OFTEN)
    assert ("store 'tj-1-join-j-L' of task 'Partition 0': cannot encode the entry for key 'k' "
            "(SerdeError: join state 'tj-1-join-j-L' of operator 'tj-1-join-j': SafeSerde() "
            "cannot write a value of type Tally") in line


@pytest.mark.parametrize("config", [{}, {"stores.t.object.cache.size": "1"}],
                         ids=["cached", "evicted"])
def test_a_tuple_value_in_a_json_table_reads_back_the_same_on_both(
        config: dict[str, Any], tmp_path: Path) -> None:
    inputs = {"in": [KV(k, i) for i, k in enumerate("abcab")]}
    got = [run(r, tuple_values, inputs, tmp_path / r, config) for r in RUNNERS]
    assert got[0] == got[1]
    assert [kv.key for kv in got[0]] == list("abcab")
    # the cache keeps the objects written as they were; past it they are what JSON decodes
    last = got[0][-1].value
    assert ("value=[3, 'seen']" in last) == bool(config) and "value=(4, 'seen')" in last


def test_an_int_key_written_to_a_string_table_by_a_function_fails_on_both(
        tmp_path: Path) -> None:
    line = both_fail(context_writer, {"in": [KV("a", "x"), KV("five", "y")]}, tmp_path)
    assert ("store 't' of task 'Partition 0': cannot encode the entry for key 5 (SerdeError: "
            "table 't': cannot serialize a key (StringSerde() cannot encode int 5") in line


def test_a_value_the_tables_serde_cannot_encode_written_by_a_function_fails_on_both(
        tmp_path: Path) -> None:
    line = both_fail(context_writer, {"in": [KV("a", "x"), KV("b", "complex")]}, tmp_path)
    assert "store 't' of task 'Partition 0': cannot encode the entry for key 'b'" in line
    assert "cannot serialize a value" in line


class Count:
    """Counts each key's messages in ``ctx.table("counts")``: a get, then a put."""

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("counts")

    def __call__(self, kv: KV[int, Any]) -> KV[int, int]:
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, n)


def counter_reads(config: dict[str, Any], keys: int) -> int:
    """Reads of the table's bytes while ``Count`` counts ``keys`` keys seen twice each."""
    app, mem = StreamApplication("count-twice"), MemorySystem()
    ins, out = mem.input("in", partitions=1), mem.output("out", partitions=1)
    app.table("counts", serde=KVSerde(JsonSerde(), JsonSerde()), changelog=False)
    app.input(ins).map(Count(), name="count").send_to(app.output(out))
    result = TestRunner(app, config).add_input(ins, [KV(i, 0) for i in range(keys)] * 2).run()
    assert [kv.value for kv in result.messages(out)] == [1] * keys + [2] * keys
    gets = [n for group, name, labels, n in result.metrics.samples()
            if (group, name, labels.get("store")) == ("store", "gets", "counts")]
    assert len(gets) == 1
    return int(gets[0])


def test_an_in_memory_store_keeps_every_object_unless_its_cache_size_is_set() -> None:
    """Past the job's object cache (100,000 entries) a store in memory decodes nothing again:
    its bytes are in memory anyway (each key is read once, as a miss); a size set in the config
    still bounds it, as the job's."""
    keys = 100_001
    assert counter_reads({}, keys) == keys
    bounded = {"stores.counts.object.cache.size": "1000", "stores.counts.write.batch.size": "100"}
    assert counter_reads(bounded, 2000) > 2000
