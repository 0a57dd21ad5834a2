"""Every store kind orders keys by their serialized bytes and answers get/put/delete/range/all
alike: the in-memory state of Spark and of operators' own tests, TestRunner's store (the job's
write-back cache and codecs over bytes in memory), and the LMDB store of the streaming runtime. Code tested with TestRunner behaves the same in production."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.state import InMemoryState, table_state
from runtime.runner import LocalRunner
from runtime.state.codec import state_codec, table_codec
from runtime.state.lmdb_store import LmdbStore
from runtime.state.memory_store import MemoryStore
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, MsgpackSerde, Serde, StringSerde
from samza_dsl.systems import LocalSystem
from samza_dsl.testing import TestRunner

# Keys that are equal in Python are equal as bytes too (no 1 beside 1.0 or True).
_INT = st.integers(-10**6, 10**6)
_SHORT = st.one_of(st.text(max_size=12), st.text("abz", max_size=3))
# LMDB holds a key of more than 478 encoded bytes under its first 478 bytes and a hash
# (runtime.state.format); LMDB's own limit is 511. Strings of one letter repeated around both
# lengths (the encodings add 0 to 3 bytes), with a tail: many share their first 478 bytes.
_LONG = st.builds(lambda c, n, tail: c * n + tail, st.sampled_from("ab"),
                  st.sampled_from([474, 476, 477, 478, 479, 480, 508, 509, 510, 511, 600, 2000]),
                  st.text("abz", max_size=2))
_TEXT = st.one_of(_SHORT, _LONG)
KINDS: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "table, JSON keys": (JsonSerde(), st.one_of(_INT, _TEXT)),
    "table, string keys": (StringSerde(), _TEXT),
    # JSON gives a tuple key back as a list: both stores do, and still find it by the tuple;
    # get, put and delete take the list they gave back
    "table, JSON tuple keys": (JsonSerde(), st.one_of(st.tuples(_INT, _TEXT),
                                                      st.tuples(st.tuples(_INT), _INT))),
    "table, msgpack tuple keys": (MsgpackSerde(), st.tuples(_TEXT, _INT)),
    "window or join state": (None, st.one_of(_INT, _TEXT, st.tuples(_INT, _TEXT),
                                             st.tuples(_TEXT, _INT))),
}


def _stores(key_serde: Serde[Any] | None, path: str
            ) -> tuple[InMemoryState, MemoryStore, LmdbStore]:
    if key_serde is None:  # window and join state: the codec of runtime.local.system
        ke, kd, ve, vd = state_codec({}, "window state 'w'")
        memory = InMemoryState()
    else:  # a table: its serdes, as TestRunner, Spark and LocalRunner build it
        ke, kd = table_codec(key_serde, "key", "t")
        ve, vd = table_codec(JsonSerde(), "value", "t")
        memory = table_state(key_serde)
    lmdb_store = LmdbStore.open(path, name="t", task="Partition 0", key_encode=ke, key_decode=kd,
                                value_encode=ve, value_decode=vd)
    # a small cache and write batch: reads from the bytes and flushes between operations
    in_bytes = MemoryStore(name="t", task="Partition 0", key_encode=ke, key_decode=kd,
                           value_encode=ve, value_decode=vd, cache_size=4, write_batch_size=3)
    return memory, in_bytes, lmdb_store


def _ops(keys: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    return st.lists(st.one_of(
        st.tuples(st.just("put"), keys, st.integers(0, 99)),
        st.tuples(st.just("delete"), keys),
        st.tuples(st.just("get"), keys),
        st.tuples(st.just("range"), keys, keys),
        st.tuples(st.just("all")),
        st.tuples(st.just("flush")),
        st.tuples(st.just("len")),
        st.tuples(st.just("maybe_flush")),
        st.tuples(st.just("get_each")),
        st.tuples(st.just("delete_every_other")),
        st.tuples(st.just("put_each"), st.integers(0, 99)),
    ), max_size=60)


def _apply(store: Any, op: tuple[Any, ...]) -> Any:
    name = op[0]
    if name == "put":
        return store.put(op[1], op[2])
    if name == "delete":
        return store.delete(op[1])
    if name == "get":
        return store.get(op[1])
    if name == "range":
        return list(store.range(op[1], op[2]))
    if name == "all":
        return list(store.all())
    if name == "len":
        return len(store)
    if name == "maybe_flush":
        return store.maybe_flush()
    if name == "flush":
        return store.flush() if hasattr(store, "flush") else None
    # the keys range and all give back are keys get, put and delete take, also mid-iteration
    if name == "get_each":
        return [(k, store.get(k)) for k, _ in store.all()]
    if name == "delete_every_other":
        for i, (k, _) in enumerate(store.all()):
            if i % 2 == 0:
                store.delete(k)
        return list(store.all())
    if name == "put_each":
        for k, v in store.all():
            store.put(k, v + op[1])
        return list(store.all())
    raise AssertionError(name)


def _check(kind: str, ops: list[tuple[Any, ...]]) -> None:
    key_serde, _ = KINDS[kind]
    d = tempfile.mkdtemp()
    memory, in_bytes, lmdb_store = _stores(key_serde, d)
    try:
        for op in ops:
            expected = _apply(lmdb_store, op)
            assert _apply(memory, op) == expected, (kind, op)
            assert _apply(in_bytes, op) == expected, (kind, op)
        assert list(memory.all()) == list(in_bytes.all()) == list(lmdb_store.all())
    finally:
        lmdb_store.close()
        shutil.rmtree(d, ignore_errors=True)


def _agreement_test(kind: str) -> Callable[..., None]:
    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(ops=_ops(KINDS[kind][1]))
    def test(ops: list[tuple[Any, ...]]) -> None:
        _check(kind, ops)
    return test


test_tables_with_json_keys_agree = _agreement_test("table, JSON keys")
test_tables_with_string_keys_agree = _agreement_test("table, string keys")
test_tables_with_json_tuple_keys_agree = _agreement_test("table, JSON tuple keys")
test_tables_with_msgpack_tuple_keys_agree = _agreement_test("table, msgpack tuple keys")
test_window_and_join_state_agree = _agreement_test("window or join state")


@pytest.mark.parametrize("kind", list(KINDS))
def test_long_keys_keep_byte_order(kind: str) -> None:
    """Keys past LMDB's limit, sharing their first 478 bytes or not, among short ones: LMDB
    used to give the long ones last, in the order of their hash."""
    names = ["a", "a" * 600, "b" * 600, "bz", "c", "a" * 600 + "b", "a" * 478, "a" * 479,
             "a" * 2000, "b" * 509]
    keys = [(n, i) for i, n in enumerate(names)] if "tuple" in kind else names
    ops: list[tuple[Any, ...]] = [("put", k, i) for i, k in enumerate(keys)]
    ops += [("all",), ("range", keys[1], keys[2]), ("range", keys[7], keys[4]),
            ("delete", keys[5]), ("flush",), ("all",), ("get", keys[8])]
    _check(kind, ops)


class _ListTable:
    def init(self, ctx: Any) -> None:
        self.table = ctx.table("t")

    def __call__(self, key: Any) -> KV[str, Any]:
        self.table.put(key, 1)
        return KV("keys", [kv.key for kv in self.table.all()] +
                  ["|"] + [kv.key for kv in self.table.range(2, 9)])


def _app() -> tuple[StreamApplication, Any, Any]:
    app = StreamApplication("order")
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))
    out = app.output(local.output("out", serde=KVSerde(JsonSerde(), JsonSerde()), partitions=1))
    app.table("t", serde=KVSerde(JsonSerde(), JsonSerde()))
    inp.map(_ListTable()).send_to(out)
    return app, inp, out


def _run_local(app: StreamApplication, tmp_path: Any, messages: list[Any]) -> list[Any]:
    """Runs ``app`` on the embedded local system with ``messages`` on "in"; what "out" got."""
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"in": messages})
    try:
        runner.run()
        return list(runner.messages("out"))
    finally:
        runner.close()


def test_test_runner_and_local_runner_give_tables_in_the_same_order(tmp_path: Any) -> None:
    keys = [9, 10, 2, 100]
    app, inp, out = _app()
    tested = TestRunner(app).add_input(inp, keys).run().messages(out)
    produced = _run_local(_app()[0], tmp_path, keys)
    # JSON bytes order: b"10" < b"100" < b"2" < b"9"
    assert tested[-1] == KV("keys", [10, 100, 2, 9, "|", 2])
    assert tested == produced


class _PutKey:
    def init(self, ctx: Any) -> None:
        self.table = ctx.table("t")

    def __call__(self, key: Any) -> KV[str, Any]:
        self.table.put(key, 1)
        return KV("n", sum(1 for _ in self.table.all()))


def _key_app(as_tuple: bool = False) -> tuple[StreamApplication, Any, Any]:
    app = StreamApplication("keys")
    local = LocalSystem("local")
    inp = app.input(local.input("in", serde=JsonSerde(), partitions=1))
    out = app.output(local.output("out", serde=KVSerde(JsonSerde(), JsonSerde()), partitions=1))
    app.table("t", serde=KVSerde(JsonSerde(), JsonSerde()))
    (inp.map(tuple) if as_tuple else inp).map(_PutKey()).send_to(out)
    return app, inp, out


def test_a_list_key_is_the_same_clear_error_in_test_runner_and_local_runner(tmp_path: Any) -> None:
    """A JSON input's arrays are lists; as a table key, both runners refuse them alike, naming
    the operator, the offset and what to use instead."""
    app, inp, _ = _key_app()
    with pytest.raises(TaskError) as tested:
        TestRunner(app).add_input(inp, [[1, "a"]]).run()
    app, _, _ = _key_app()
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"in": [[1, "a"]]})
    try:
        with pytest.raises(TaskError) as produced:
            runner.run()
    finally:
        runner.close()
    for err in (tested.value, produced.value):
        text = str(err)
        assert "unhashable type: 'list'" in text and "use a tuple instead of a list" in text
        assert err.offset == 0 and err.stream == "in" and err.op_id is not None


@pytest.mark.parametrize("kind", ["table, JSON tuple keys", "table, msgpack tuple keys"])
def test_every_store_takes_back_the_list_keys_it_gives(kind: str) -> None:
    """A tuple key comes back from range and all as a list (JSON and msgpack have no tuples):
    get, put and delete take that list as the tuple, so emptying a table by its own keys works.
    They used to refuse it (unhashable type: 'list') in both stores."""
    key_serde, _ = KINDS[kind]
    d = tempfile.mkdtemp()
    memory, in_bytes, lmdb_store = _stores(key_serde, d)
    try:
        for store in (memory, in_bytes, lmdb_store):
            store.put(("a", 1), 1)
            store.put((("b",), 2), 2)
            store.put(("c" * 600, 3), 3)
            store.flush() if hasattr(store, "flush") else None
            got = list(store.all())
            want = sorted([["a", 1], [["b"], 2], ["c" * 600, 3]], key=key_serde.serialize)
            assert [k for k, _ in got] == want
            assert all(isinstance(k, list) for k, _ in got)
            assert [store.get(k) for k, _ in got] == [v for _, v in got]
            assert sorted(v for _, v in got) == [1, 2, 3]
            for k, v in store.all():
                store.put(k, v * 10)
            assert store.get(("a", 1)) == 10 and store.get((("b",), 2)) == 20
            for k, _ in store.all():
                store.delete(k)
            assert list(store.all()) == [] and store.get(("a", 1)) is None
            assert len(store) == 0
    finally:
        lmdb_store.close()
        shutil.rmtree(d, ignore_errors=True)


def test_tuple_keys_under_json_come_back_as_lists_from_every_store(tmp_path: Any) -> None:
    app, inp, out = _key_app(as_tuple=True)
    keys = [["a", 1], ["b", 2], ["a", 1]]
    tested = TestRunner(app).add_input(inp, keys).run().messages(out)
    produced = _run_local(_key_app(as_tuple=True)[0], tmp_path, keys)
    assert tested == produced == [KV("n", 1), KV("n", 2), KV("n", 2)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["put", "delete", "put_delete"]), st.integers(0, 300),
                          st.integers(0, 150), st.sampled_from(["flush", "all", "range", ""])),
                max_size=10))
def test_flushes_of_many_keys_agree(steps: list[tuple[str, int, int, str]]) -> None:
    """Spans of keys put and deleted, more than a flush places in the sorted keys one by one
    (the store of bytes in memory sorts them again, and keeps writing meanwhile)."""
    ops: list[tuple[Any, ...]] = []
    for what, start, n, then in steps:
        for k in range(start, start + n):
            if what != "delete":
                ops.append(("put", k, k % 97))
            if what != "put":
                ops.append(("delete", k - n // 2))
        if then:
            ops.append(("range", start, start + n) if then == "range" else (then,))
    _check("window or join state", ops)


def test_every_store_counts_the_values_and_deletes_its_flushes_write(tmp_path: Any) -> None:
    """A flush counts each dirty key once: a value written, or a delete (a delete of a key the
    bytes never held too, as a tombstone goes to the changelog)."""
    _, in_bytes, lmdb_store = _stores(None, str(tmp_path))
    try:
        for store in (in_bytes, lmdb_store):
            for k in range(5):
                store.put(k, k)
            store.flush()
            store.delete(1)
            store.delete(2)
            store.put(2, "again")
            store.put(7, None)
            store.delete(9)
            store.flush()
            assert (store.writes, store.deletes) == (6, 3), type(store).__name__
    finally:
        lmdb_store.close()
