"""LmdbStore: a dict's semantics through the write-back cache, the changelog protocol, and the
restore rules (host affinity, rebuild after a mismatch, loss, corruption or a crash mid-commit,
and the trim of changelog entries past the checkpoint), on real LMDB files."""

from __future__ import annotations

import collections
import json
import logging
import os
import pickle
import random
import shutil
import struct
import tempfile
from collections.abc import Iterator
from typing import Any

import lmdb
import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from operators.state import decode_key, encode_key
from runtime.local.system import LocalJob
from runtime.runner import LocalRunner
from runtime.state.format import MAX_KEY, PREFIX, frame, lmdb_key
from runtime.state.lmdb_store import LmdbStore
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import SamzaError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

Entry = tuple[bytes, bytes | None]


class ListChangelog:
    """A changelog partition in a list. ``append`` buffers, as a producer does, until
    ``flush_producer()``; ``crash()`` drops what is buffered."""

    def __init__(self, batch: int = 3) -> None:
        self.log: list[Entry] = []
        self.buffer: list[Entry] = []
        self.batch = batch

    def append(self, entries: list[Entry]) -> None:
        self.buffer.extend(entries)

    def end_offset(self) -> int:
        return len(self.log)

    def read(self, start: int, end: int) -> Iterator[tuple[int, list[Entry]]]:
        end = min(end, len(self.log))
        for i in range(start, end, self.batch):
            yield i, self.log[i:min(i + self.batch, end)]

    def flush_producer(self) -> None:
        self.log.extend(self.buffer)
        self.buffer.clear()

    def crash(self) -> None:
        self.buffer.clear()

    def replay(self, end: int | None = None) -> dict[bytes, bytes]:
        state: dict[bytes, bytes] = {}
        for k, v in self.log[:end]:
            if v is None:
                state.pop(k, None)
            else:
                state[k] = v
        return state


def open_store(path: Any, changelog: ListChangelog | None = None, checkpointed: int | None = None,
               **kw: Any) -> LmdbStore:
    return LmdbStore.open(path, name="counts", task="Partition 0", key_encode=encode_key,
                          key_decode=decode_key, value_encode=pickle.dumps,
                          value_decode=pickle.loads, changelog=changelog,
                          checkpointed=checkpointed, **kw)


def commit(store: LmdbStore, changelog: ListChangelog) -> int:
    """The runtime's commit: flush stores, flush the producer, mark, (write the checkpoint)."""
    store.flush()
    changelog.flush_producer()
    offset = changelog.end_offset()
    store.mark_committed(offset)
    return offset


def ordered(model: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """The store's order: by the bytes of the encoded keys, however long."""
    return sorted(model.items(), key=lambda kv: encode_key(kv[0]))


def decoded(raw: dict[bytes, bytes]) -> dict[Any, Any]:
    return {decode_key(k): pickle.loads(v) for k, v in raw.items()}


# -- a dict model, with commits, crashes and restarts ----------------------------------------------

# long keys: encode_key adds 2 bytes to a str, so 477 characters is the first long one; those
# of one letter share their first 478 bytes (a group, in LMDB)
long_strings = st.builds(lambda c, n, tail: c * n + tail, st.sampled_from("ab"),
                         st.sampled_from([475, 476, 477, 478, 509, 510, 600, 5000]),
                         st.sampled_from(["", "a", "z"]))
keys = st.one_of(st.integers(-50, 50), st.integers(-(1 << 70), 1 << 70),
                 st.sampled_from(["", "a", "ab", "b", "é", "z\x00"]),
                 st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5)),
                 long_strings, st.tuples(long_strings, st.integers(0, 2)))
values = st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3))


class StoreMachine(RuleBasedStateMachine):
    """``model`` is what the store should hold; ``committed`` what it held at the last commit,
    and so what a restart restores. At every commit the whole changelog replays to the model."""

    @initialize(cache_size=st.sampled_from([1, 4, 10, 1000]),
                write_batch_size=st.sampled_from([1, 3, 50]))
    def start(self, cache_size: int, write_batch_size: int) -> None:
        self.dir = tempfile.mkdtemp(prefix="lmdb-store-")
        self.kw = {"cache_size": cache_size, "write_batch_size": write_batch_size}
        self.changelog = ListChangelog()
        self.checkpoint: int | None = None
        self.model: dict[Any, Any] = {}
        self.committed: dict[Any, Any] = {}
        self.store = open_store(self.dir, self.changelog, **self.kw)

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(k=keys, v=values)
    def put(self, k: Any, v: Any) -> None:
        self.store.put(k, v)
        self.model[k] = v

    @rule(k=keys)
    def put_none_deletes(self, k: Any) -> None:
        self.store.put(k, None)
        self.model.pop(k, None)

    @rule(k=keys)
    def delete(self, k: Any) -> None:
        self.store.delete(k)
        self.model.pop(k, None)

    @rule(k=keys)
    def get(self, k: Any) -> None:
        assert self.store.get(k) == self.model.get(k)

    @rule(a=keys, b=keys)
    def range(self, a: Any, b: Any) -> None:
        lo, hi = encode_key(a), encode_key(b)
        want = [(k, v) for k, v in ordered(self.model) if lo <= encode_key(k) < hi]
        assert list(self.store.range(a, b)) == want

    @rule()
    def all(self) -> None:
        assert list(self.store.all()) == ordered(self.model)

    @rule()
    def delete_while_iterating(self) -> None:
        doomed = [k for i, (k, _) in enumerate(self.store.all()) if i % 2 == 0]
        for i, (k, _) in enumerate(self.store.all()):
            if i % 2 == 0:
                self.store.delete(k)
                self.model.pop(k)
        assert [k for k, _ in self.store.all()] == [k for k, _ in ordered(self.model)]
        assert not set(doomed) & set(self.model)

    @rule()
    def flush(self) -> None:
        self.store.flush()

    @rule()
    def maybe_flush(self) -> None:
        self.store.maybe_flush()

    @rule()
    def commit(self) -> None:
        self.checkpoint = commit(self.store, self.changelog)
        self.committed = dict(self.model)
        assert decoded(self.changelog.replay()) == self.model

    @rule(flush=st.booleans(), producer=st.booleans())
    def crash_and_restart(self, flush: bool, producer: bool) -> None:
        """A run that stops anywhere after its last commit: maybe after a flush, maybe after the
        producer flush too, but before the checkpoint."""
        if flush:
            self.store.flush()
        if producer:
            self.changelog.flush_producer()
        self.store.close()
        self.restart()

    @rule()
    def corrupt_and_restart(self) -> None:
        self.store.close()
        with open(os.path.join(self.dir, "data.mdb"), "wb") as f:
            f.write(b"not an LMDB file" * 512)
        self.restart()
        assert self.store.restore_info["mode"] in ("rebuilt", "fresh")

    def restart(self) -> None:
        self.changelog.crash()  # the dead run's producer buffer is gone
        self.store = open_store(self.dir, self.changelog, self.checkpoint, **self.kw)
        self.model = dict(self.committed)
        assert list(self.store.all()) == ordered(self.model)

    @precondition(lambda self: hasattr(self, "store"))
    @invariant()
    def length(self) -> None:
        assert len(self.store) == len(self.model)


StoreMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_store_machine = StoreMachine.TestCase


@pytest.mark.parametrize("cache_writes", [True, False])
def test_random_ops_against_a_dict_with_eviction(tmp_path, cache_writes):
    """Many more operations than the machine runs, a cache of 10 and scans over 1024 keys;
    with and without the values a flush writes kept in the object cache."""
    rng = random.Random(7)
    changelog = ListChangelog(batch=100)
    store = open_store(tmp_path / "s", changelog, cache_size=10, write_batch_size=97)
    store.cache_writes = cache_writes
    model: dict[Any, Any] = {}
    pool = [rng.choice([i, ("k", i), f"s{i}"]) for i in range(3000)]
    for step in range(30_000):
        k = rng.choice(pool)
        op = rng.random()
        if op < 0.45:
            store.put(k, step)
            model[k] = step
        elif op < 0.55:
            store.delete(k)
            model.pop(k, None)
        else:
            assert store.get(k) == model.get(k)
        store.maybe_flush()
        if step % 5000 == 4999:
            assert list(store.all()) == ordered(model)
            a, b = sorted(rng.sample(pool, 2), key=encode_key)
            assert list(store.range(a, b)) == [
                kv for kv in ordered(model) if encode_key(a) <= encode_key(kv[0]) < encode_key(b)]
            assert len(store) == len(model)
            assert len(store._clean) <= 10
    commit(store, changelog)
    assert decoded(changelog.replay()) == model
    store.close()


def test_writes_during_a_scan_across_chunks_and_flushes(tmp_path):
    store = open_store(tmp_path / "s", write_batch_size=1)
    for i in range(3000):
        store.put(i, i)
    seen = []
    for k, v in store.all():
        seen.append((k, v))
        if k % 500 == 0 and k < 3000:
            store.put(k + 1, -1)  # ahead of the scan: a current value
            store.delete(k + 2)  # ahead: skipped
            store.put(10_000 + k, 0)  # a new key past the scan's position
            store.flush()  # LMDB changes under the chunk being read
    keys = [k for k, _ in seen]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    for k in range(0, 3000, 500):
        assert (k + 1, -1) in seen and all(s[0] != k + 2 for s in seen)
        assert (10_000 + k, 0) in seen  # flushed before the scan got there
    assert all(v == k for k, v in seen if k < 3000 and k % 500 > 2)
    store.close()


def test_string_keys_order_by_utf8_bytes(tmp_path):
    """A tables-style codec: keys are str.encode'd, so the order is the utf-8 byte order."""
    enc, dec = msgspec.json.encode, msgspec.json.decode
    store = LmdbStore.open(tmp_path / "t", name="profiles", task="Partition 1",
                           key_encode=str.encode, key_decode=bytes.decode, value_encode=enc,
                           value_decode=dec, cache_size=2)
    words = ["b", "a", "é", "z", "ab", "", "Z", "\U0001f600", "\uffff"]
    for i, w in enumerate(words):
        store.put(w, {"i": i})
    want = sorted(words, key=str.encode)
    assert [k for k, _ in store.all()] == want
    assert [k for k, _ in store.range("a", "z")] == [w for w in want if "a" <= w < "z"]
    assert [k for k, _ in store.range("z", "a")] == []
    assert store.get("é") == {"i": 2} and store.get("nope") is None
    store.mark_committed(None)
    store.close()
    store = LmdbStore.open(tmp_path / "t", name="profiles", task="Partition 1",
                           key_encode=str.encode, key_decode=bytes.decode, value_encode=enc,
                           value_decode=dec)
    assert dict(store.all()) == {w: {"i": i} for i, w in enumerate(words)}
    store.close()


# -- write-back ---------------------------------------------------------------------------------

def test_nothing_is_written_before_a_flush(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog)
    for i in range(100):
        store.put(i, i)
    store.delete(5)
    assert store.get(3) == 3 and store.get(5) is None and len(store) == 99
    assert changelog.buffer == [] and store._entries() == 0
    store.close()  # no implicit flush
    assert changelog.buffer == []
    store = open_store(tmp_path / "s", changelog)
    assert list(store.all()) == []
    store.close()


def test_flush_appends_the_last_value_per_key_and_tombstones(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog)
    store.put("a", 1)
    store.put("a", 2)
    store.put("b", 1)
    store.delete("b")
    store.put("c", 1)
    store.put("c", None)
    store.delete("never-stored")
    store.flush()
    assert sorted(changelog.buffer) == sorted([
        (encode_key("a"), pickle.dumps(2)), (encode_key("b"), None), (encode_key("c"), None),
        (encode_key("never-stored"), None)])
    assert store._entries() == 1
    store.flush()  # nothing dirty: nothing appended
    assert len(changelog.buffer) == 4
    store.close()


def test_maybe_flush_respects_write_batch_size(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog, write_batch_size=3)
    store.put(1, 1)
    store.put(1, 2)
    store.put(2, 1)
    store.maybe_flush()
    assert changelog.buffer == []  # two dirty keys
    store.delete(3)
    store.maybe_flush()
    assert len(changelog.buffer) == 3
    store.maybe_flush()
    assert len(changelog.buffer) == 3
    store.close()


def test_range_flushes_first(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog)
    store.put(1, "x")
    assert list(store.range(0, 10)) == [(1, "x")]
    assert changelog.buffer == [(encode_key(1), pickle.dumps("x"))]
    store.close()


# -- commit and restore -------------------------------------------------------------------------

def fill(store: LmdbStore, changelog: ListChangelog, n: int = 50) -> tuple[int, dict[Any, Any]]:
    """Two commits' worth of writes (the first at offset ``n``); returns the last checkpoint
    and the state at it."""
    for i in range(n):
        store.put(i, {"n": i})
    assert commit(store, changelog) == n
    for i in range(0, n, 3):
        store.delete(i)
    store.put("last", 1)
    offset = commit(store, changelog)
    return offset, dict(store.all())


def test_reopen_at_the_checkpoint_uses_the_local_copy(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog)
    assert store.restore_info["mode"] == "fresh"
    offset, state = fill(store, changelog)
    store.close()
    store = open_store(tmp_path / "s", changelog, offset)
    info = store.restore_info
    assert info["mode"] == "host-affinity" and info["entries_replayed"] == 0
    assert info["trimmed"] == 0 and info["seconds"] >= 0
    assert dict(store.all()) == state and len(store) == len(state)
    assert changelog.buffer == []
    store.close()


@pytest.mark.parametrize("damage", ["other checkpoint", "deleted", "garbage", "truncated",
                                    "crash mid-commit", "crash after producer flush"])
def test_rebuilt_from_the_changelog(tmp_path, caplog, damage):
    changelog = ListChangelog()
    path = tmp_path / "s"
    store = open_store(path, changelog)
    offset, state = fill(store, changelog)
    if damage == "other checkpoint":
        offset = 50  # the first commit's
        state = decoded(changelog.replay(offset))
    store.put("after", 1)
    store.delete(1)
    if damage.startswith("crash"):
        store.flush()  # the commit flushed the store...
        if damage == "crash after producer flush":
            changelog.flush_producer()  # ...and the producer, but wrote no checkpoint
    store.close()
    changelog.crash()
    data_file = path / "data.mdb"
    if damage == "deleted":
        shutil.rmtree(path)
    elif damage == "garbage":
        data_file.write_bytes(b"garbage!" * 4096)
    elif damage == "truncated":
        data_file.write_bytes(data_file.read_bytes()[:10_000])
    caplog.set_level(logging.INFO, logger="samza_dsl.state")
    caplog.clear()
    store = open_store(path, changelog, offset)
    info = store.restore_info
    assert info["mode"] == "rebuilt" and info["entries_replayed"] == offset
    assert dict(store.all()) == state
    assert all("'counts'" in r.message and "'Partition 0'" in r.message for r in caplog.records)
    rebuild = [r for r in caplog.records if "rebuilding" in r.message]
    assert len(rebuild) == 1
    if damage in ("garbage", "truncated"):
        assert rebuild[0].levelno == logging.WARNING and str(data_file) in rebuild[0].message
        assert "corrupt" in info["reason"]
    else:
        assert rebuild[0].levelno == logging.INFO
    if damage == "crash after producer flush" or damage == "other checkpoint":
        assert info["trimmed"] > 0
        changelog.flush_producer()
        assert decoded(changelog.replay()) == state
    # and committed again, the next start is a host-affinity one
    offset = commit(store, changelog)
    store.close()
    store = open_store(path, changelog, offset)
    assert store.restore_info["mode"] == "host-affinity" and dict(store.all()) == state
    store.close()


def test_trim_compensates_entries_past_the_checkpoint(tmp_path):
    changelog = ListChangelog()
    path = tmp_path / "s"
    store = open_store(path, changelog)
    for i in range(10):
        store.put(i, i)
    offset = commit(store, changelog)
    state = dict(store.all())
    # a run that flushed its producer but crashed before checkpointing
    for i in range(5, 15):
        store.put(i, -i)
    store.delete(0)
    store.flush()
    changelog.flush_producer()
    store.close()
    assert decoded(changelog.replay()) != state
    store = open_store(path, changelog, offset)
    info = store.restore_info
    assert info["mode"] == "rebuilt" and info["trimmed"] == 11  # keys 0 and 5..14
    assert dict(store.all()) == state
    assert changelog.end_offset() == offset + 11  # the compensation waits for the producer
    changelog.flush_producer()
    assert decoded(changelog.replay()) == state
    store.close()


def test_with_no_checkpoint_the_whole_changelog_is_compensated(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog)
    store.put("k", 1)
    commit(store, changelog)
    store.put("j", 2)
    store.flush()
    changelog.flush_producer()  # appended and durable, but the local copy is uncommitted
    store.close()
    # another host: no local copy, no checkpoint: all of the changelog is compensated
    elsewhere = open_store(tmp_path / "t", changelog, None)
    assert elsewhere.restore_info["mode"] == "fresh" and elsewhere.restore_info["trimmed"] == 2
    assert list(elsewhere.all()) == []
    commit(elsewhere, changelog)
    assert changelog.replay() == {}
    elsewhere.close()


def test_a_flush_between_flush_and_mark_committed_keeps_it_uncommitted(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog, write_batch_size=1)
    store.put(1, 1)
    store.flush()
    store.put(2, 2)
    store.maybe_flush()  # during an async commit: LMDB is now past the commit's offset
    changelog.flush_producer()
    store.mark_committed(1)
    store.close()
    store = open_store(tmp_path / "s", changelog, 1)
    assert store.restore_info["mode"] == "rebuilt" and dict(store.all()) == {1: 1}
    store.close()


def test_the_changelog_is_the_truth_once_enabled(tmp_path, caplog):
    store = open_store(tmp_path / "s")
    store.put(1, 1)
    store.flush()
    store.mark_committed(None)
    store.close()
    caplog.set_level(logging.INFO, logger="samza_dsl.state")
    store = open_store(tmp_path / "s", ListChangelog(), None)
    assert store.restore_info["mode"] == "fresh" and list(store.all()) == []
    assert any(r.levelno == logging.WARNING and "without a changelog" in r.message
               for r in caplog.records)
    store.close()


def test_replay_folds_and_deletes(tmp_path):
    changelog = ListChangelog(batch=1000)
    changelog.log = [(encode_key(i % 100), pickle.dumps(i)) for i in range(5000)]
    changelog.log += [(encode_key(i), None) for i in range(0, 100, 2)]
    store = open_store(tmp_path / "s", changelog, len(changelog.log))
    assert store.restore_info["entries_replayed"] == 5050
    assert dict(store.all()) == {i: 4900 + i for i in range(1, 100, 2)}
    store.close()


# -- without a changelog ------------------------------------------------------------------------

def test_without_a_changelog_the_local_copy_persists(tmp_path):
    store = open_store(tmp_path / "s")
    assert store.restore_info["mode"] == "fresh"
    for i in range(1000):
        store.put(("k", i), [i])
    store.flush()
    store.put(("k", 0), None)
    store.flush()
    store.mark_committed(None)
    store.close()
    store = open_store(tmp_path / "s", checkpointed=123)  # a checkpoint does not matter
    assert store.restore_info["mode"] == "local"
    assert len(store) == 999 and store.get(("k", 1)) == [1] and store.get(("k", 0)) is None
    assert next(iter(store.range(("k", 500), ("k", 501)))) == (("k", 500), [500])
    store.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_without_a_changelog_corruption_is_an_error(tmp_path, damage):
    store = open_store(tmp_path / "s")
    for i in range(2000):
        store.put(i, "x" * 100)
    store.flush()
    store.close()
    data_file = tmp_path / "s" / "data.mdb"
    raw = data_file.read_bytes()
    data_file.write_bytes(b"garbage!" * 1000 if damage == "garbage" else raw[:len(raw) // 2])
    with pytest.raises(SamzaError) as e:
        open_store(tmp_path / "s")
    text = str(e.value)
    assert str(data_file) in text and "'counts'" in text and "'Partition 0'" in text
    assert "cannot be rebuilt" in text and "changelog" in text
    assert data_file.exists()  # nothing deleted


def test_opening_an_open_store_again_is_an_error_not_a_rebuild(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog)
    store.put(1, 1)
    commit(store, changelog)
    with pytest.raises(SamzaError, match="already open"):
        open_store(tmp_path / "s", changelog, 0)
    assert store.get(1) == 1 and list(store.all()) == [(1, 1)]
    store.close()
    store.close()  # idempotent


def test_eviction_with_a_small_cache(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog, cache_size=10, write_batch_size=7)
    for i in range(100):
        store.put(i, i * i)
        store.maybe_flush()
    for _ in range(3):
        for i in range(100):
            assert store.get(i) == i * i
            assert len(store._clean) <= 10
    for i in range(0, 100, 2):
        store.delete(i)
        store.maybe_flush()
    assert [store.get(i) for i in range(5)] == [None, 1, None, 9, None]
    assert dict(store.all()) == {i: i * i for i in range(1, 100, 2)}
    assert len(store) == 50
    store.close()


@pytest.mark.parametrize("key, value, error", [
    (object, 1, r"'counts'.*'Partition 0'.*cannot encode the entry for key <class 'object'>"),
    (2, lambda: 0, "cannot encode the entry for key 2"),  # pickle cannot
])
def test_unencodable_entries_fail_the_flush_by_name(tmp_path, key, value, error):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog)
    store.put(1, 1)
    store.put(key, value)
    with pytest.raises(SamzaError, match=error):
        store.flush()
    assert changelog.buffer == [] and store.get(1) == 1  # nothing written: all still dirty
    store.close()
    store = open_store(tmp_path / "s", changelog)
    assert list(store.all()) == []
    store.close()


# -- checksums: a value changed on disk ----------------------------------------------------------

def flip_value(data_file: Any, lkey: bytes, value: bytes) -> int:
    """Flips the low bit of the last byte of the LMDB value under ``lkey`` (which ends with
    ``value``) in every page of ``data_file`` holding it, old copies included; returns how many.
    A leaf node is: data size (2 + 2 bytes), flags (2), key size (2), key, data."""
    raw = bytearray(data_file.read_bytes())
    pattern = struct.pack("<H", len(lkey)) + lkey
    n = 0
    i = raw.find(pattern)
    while i >= 0:
        lo, hi, flags = struct.unpack_from("<HHH", raw, i - 6)
        end = i + len(pattern) + (lo | hi << 16)
        if flags == 0 and raw[end - len(value):end] == value:
            raw[end - 1] ^= 1
            n += 1
        i = raw.find(pattern, i + 1)
    data_file.write_bytes(bytes(raw))
    return n


def committed_store(path: Any, changelog: ListChangelog | None) -> int | None:
    store = open_store(path, changelog)
    for i in range(300):
        store.put(("k", i), i)
    store.flush()
    if changelog is None:
        store.mark_committed(None)
        offset = None
    else:
        changelog.flush_producer()
        offset = changelog.end_offset()
        store.mark_committed(offset)
    store.close()
    return offset


def flip(path: Any, key: Any, value: Any) -> None:
    assert flip_value(path / "data.mdb", lmdb_key(encode_key(key)), pickle.dumps(value)) >= 1


@pytest.mark.parametrize("read", ["get", "all", "range", "len and get"])
def test_a_value_changed_on_disk_is_rebuilt_from_the_changelog(tmp_path, caplog, read):
    changelog = ListChangelog(batch=50)
    path = tmp_path / "s"
    offset = committed_store(path, changelog)
    flip(path, ("k", 7), 7)
    store = open_store(path, changelog, offset)
    assert store.restore_info["mode"] == "host-affinity"  # nothing read yet
    # flushed since the commit (only in LMDB and the changelog's buffer), and dirty
    store.put(("k", 1), "flushed")
    store.delete(("k", 2))
    store.flush()
    store.put(("k", 3), "dirty")
    caplog.set_level(logging.WARNING, logger="samza_dsl.state")
    want = {("k", i): i for i in range(300)} | {("k", 1): "flushed", ("k", 3): "dirty"}
    del want[("k", 2)]
    if read == "get":
        assert store.get(("k", 7)) == 7
    elif read == "all":
        assert dict(store.all()) == want
    elif read == "range":
        assert list(store.range(("k", 5), ("k", 9))) == [(("k", i), i) for i in range(5, 9)]
    else:
        assert len(store) == len(want) and store.get(("k", 7)) == 7
    [warning] = caplog.records
    text = warning.getMessage()
    assert "'counts'" in text and "'Partition 0'" in text and str(path / "data.mdb") in text
    assert "fails its checksum" in text and "rebuilding" in text
    assert dict(store.all()) == want and store.get(("k", 7)) == 7
    # what the rebuild wrote back is uncommitted until the next commit, then committed
    store.close()
    store = open_store(path, changelog, offset)
    assert store.restore_info["mode"] == "rebuilt"
    assert dict(store.all()) == {("k", i): i for i in range(300)}
    offset = commit(store, changelog)
    store.close()
    store = open_store(path, changelog, offset)
    assert store.restore_info["mode"] == "host-affinity" and store.get(("k", 7)) == 7
    store.close()


def test_a_changed_value_met_by_the_trim_at_open_rebuilds(tmp_path, caplog):
    changelog = ListChangelog()
    path = tmp_path / "s"
    offset = committed_store(path, changelog)
    changelog.log.append((encode_key(("k", 7)), pickle.dumps(-1)))  # a run that did not commit
    flip(path, ("k", 7), 7)
    caplog.set_level(logging.WARNING, logger="samza_dsl.state")
    store = open_store(path, changelog, offset)
    info = store.restore_info
    assert info["mode"] == "rebuilt" and "fails its checksum" in info["reason"]
    assert str(path / "data.mdb") in caplog.records[0].getMessage()
    assert store.get(("k", 7)) == 7 and info["trimmed"] == 1
    changelog.flush_producer()
    assert changelog.log[-1] == (encode_key(("k", 7)), pickle.dumps(7))
    store.close()


def test_without_a_changelog_a_changed_value_is_an_error(tmp_path):
    path = tmp_path / "s"
    committed_store(path, None)
    flip(path, ("k", 7), 7)
    store = open_store(path)
    assert store.get(("k", 6)) == 6
    with pytest.raises(SamzaError) as e:
        store.get(("k", 7))
    text = str(e.value)
    assert "'counts'" in text and str(path / "data.mdb") in text and "fails its checksum" in text
    assert "cannot be rebuilt" in text and "delete the directory" in text
    with pytest.raises(SamzaError, match="fails its checksum"):
        list(store.all())
    store.close()


def format_1_store(path: Any, entries: dict[bytes, bytes], changelog_offset: int | None) -> None:
    """A store as the first format wrote it: no checksums."""
    os.makedirs(path)
    env = lmdb.open(str(path), max_dbs=2, subdir=True)
    data, meta = env.open_db(b"data"), env.open_db(b"meta")
    with env.begin(write=True) as txn:
        for k, v in entries.items():
            txn.put(b"\x00" + k, v, db=data)
        txn.put(b"state", json.dumps({"version": 1, "changelog_offset": changelog_offset,
                                      "committed": True}).encode(), db=meta)
    env.close()


def test_a_format_1_store_is_rebuilt_from_its_changelog(tmp_path):
    changelog = ListChangelog()
    changelog.log = [(encode_key(i), pickle.dumps(i)) for i in range(10)]
    format_1_store(tmp_path / "s", {encode_key(i): pickle.dumps(-i) for i in range(10)}, 10)
    store = open_store(tmp_path / "s", changelog, 10)
    info = store.restore_info
    assert info["mode"] == "rebuilt" and "older store format 1" in info["reason"]
    assert dict(store.all()) == {i: i for i in range(10)}
    store.close()


def test_a_format_1_store_without_a_changelog_is_migrated(tmp_path):
    entries = {encode_key(("k", i)): pickle.dumps(i) for i in range(3000)}
    format_1_store(tmp_path / "s", entries, None)
    store = open_store(tmp_path / "s")
    assert store.restore_info["mode"] == "local"
    assert dict(store.all()) == {("k", i): i for i in range(3000)}
    store.close()
    store = open_store(tmp_path / "s")  # migrated once: the second open reads the new format
    assert store.get(("k", 2999)) == 2999 and len(store) == 3000
    store.close()


# -- long keys -----------------------------------------------------------------------------------

def format_2_store(path: Any, entries: dict[bytes, bytes], changelog_offset: int | None) -> None:
    """A store as the second format wrote it: a key of 511 bytes or more under b"\\x01" and its
    hash, so after every other key."""
    import hashlib

    from runtime.state.format import checksummed

    os.makedirs(path)
    env = lmdb.open(str(path), max_dbs=2, subdir=True)
    data, meta = env.open_db(b"data"), env.open_db(b"meta")
    with env.begin(write=True) as txn:
        for k, v in entries.items():
            if len(k) < 511:
                txn.put(b"\x00" + k, checksummed(b"\x00" + k, v), db=data)
            else:
                lk = b"\x01" + hashlib.blake2b(k, digest_size=32).digest()
                txn.put(lk, checksummed(lk, struct.pack("<I", len(k)) + k + v), db=data)
        txn.put(b"state", json.dumps({"version": 2, "changelog_offset": changelog_offset,
                                      "committed": True}).encode(), db=meta)
    env.close()


FORMAT_2_KEYS = ["a", "a" * 480, "a" * 509, "a" * 600, "a" * 600 + "b", "b" * 700, "bz", "c"]


def test_a_format_2_store_is_rebuilt_from_its_changelog(tmp_path):
    """Format 2 gave long keys in the order of their hash: such a copy is not used as is."""
    changelog = ListChangelog()
    changelog.log = [(encode_key(k), pickle.dumps(i)) for i, k in enumerate(FORMAT_2_KEYS)]
    n = len(FORMAT_2_KEYS)
    format_2_store(tmp_path / "s", {encode_key(k): pickle.dumps(-1) for k in FORMAT_2_KEYS}, n)
    store = open_store(tmp_path / "s", changelog, n)
    info = store.restore_info
    assert info["mode"] == "rebuilt" and "older store format 2" in info["reason"]
    assert list(store.all()) == [(k, i) for i, k in enumerate(FORMAT_2_KEYS)]
    store.close()


def test_a_format_2_store_without_a_changelog_is_migrated_in_byte_order(tmp_path):
    entries = {encode_key(k): pickle.dumps(i) for i, k in enumerate(FORMAT_2_KEYS)}
    entries |= {encode_key(("k", i)): pickle.dumps(i) for i in range(2000)}
    format_2_store(tmp_path / "s", entries, None)
    want = [(k, i) for i, k in enumerate(FORMAT_2_KEYS)] + [(("k", i), i) for i in range(2000)]
    store = open_store(tmp_path / "s")
    assert store.restore_info["mode"] == "local"
    assert list(store.all()) == want
    assert store.get("a" * 509) == 2 and store.get("b" * 700) == 5 and len(store) == len(want)
    store.close()
    store = open_store(tmp_path / "s")  # migrated once: the second open reads the new format
    assert list(store.all()) == want
    assert list(store.range("a" * 500, "b")) == want[2:5]
    store.close()


def test_a_group_of_long_keys_across_chunks_and_flushes(tmp_path):
    """3000 keys sharing their first 478 bytes (one group in LMDB, hash-ordered there) among
    short keys: scans give them by their bytes, also when a write lands mid-group."""
    store = open_store(tmp_path / "s", write_batch_size=1)
    head = "x" * 600
    for i in range(3000):
        store.put((head, i), i)
        store.put(i, i)
    store.put((head[:470],), "short")
    store.put(("y",), "after")
    want = sorted([((head, i), i) for i in range(3000)] + [(i, i) for i in range(3000)]
                  + [((head[:470],), "short"), (("y",), "after")], key=lambda kv: encode_key(kv[0]))
    assert list(store.all()) == want
    seen = []
    for k, v in store.all():
        seen.append((k, v))
        if isinstance(k, tuple) and k[0] == head and k[1] % 700 == 0:
            store.put((head, k[1] + 1), -1)  # ahead in the group: its current value
            store.delete((head, k[1] + 2))  # ahead: skipped
            store.flush()  # LMDB changes under the group being read
    keys = [encode_key(k) for k, _ in seen]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    for i in range(0, 3000, 700):
        assert ((head, i + 1), -1) in seen and all(k != (head, i + 2) for k, _ in seen)
    lo, hi = (head, 1500), (head, 2500)
    assert list(store.range(lo, hi)) == [
        kv for kv in ordered(dict(store.all())) if encode_key(lo) <= encode_key(kv[0]) < encode_key(hi)]
    store.close()



def test_keys_past_lmdbs_limit_work_and_restore(tmp_path):
    """A tables-style codec (str.encode): 478 bytes is the longest short key."""
    def opened(path: Any, changelog: ListChangelog | None = None,
               checkpointed: int | None = None) -> LmdbStore:
        return LmdbStore.open(path, name="profiles", task="Partition 0", key_encode=str.encode,
                              key_decode=bytes.decode, value_encode=pickle.dumps,
                              value_decode=pickle.loads, changelog=changelog,
                              checkpointed=checkpointed, cache_size=1, write_batch_size=2)

    names = ["a" * 478, "a" * 479, "a" * 510, "a" * 511, "a" * 600, "a" * 478 + "b",
             "b" * 5000, "b" * 5000 + "x", "m", ""]
    assert [len(lmdb_key(n.encode())) <= MAX_KEY for n in names] == [True] * len(names)
    changelog = ListChangelog()
    store = opened(tmp_path / "s", changelog)
    for i, n in enumerate(names):
        store.put(n, i)
        store.maybe_flush()
    assert [store.get(n) for n in names] == list(range(len(names)))
    store.delete("b" * 5000)
    store.put("a" * 600, "again")
    want = {n: i for i, n in enumerate(names)} | {"a" * 600: "again"}
    del want["b" * 5000]
    assert dict(store.all()) == want
    assert [k for k, _ in store.all()] == sorted(want)  # by their bytes, long or short
    for lo, hi in [("a", "b"), ("a" * 600, "b" * 5000 + "y"), ("a" * 479, "a" * 600),
                   ("a" * 478, "a" * 478 + "b"), ("a" * 480, "b" * 5000), ("", "a" * 478)]:
        assert list(store.range(lo, hi)) == [(n, want[n]) for n in sorted(want) if lo <= n < hi]
    assert len(store) == len(want) and store.get("b" * 5000) is None
    offset = commit(store, changelog)
    assert {k.decode() for k, _ in changelog.log} == set(names)  # full keys in the changelog
    store.close()
    store = opened(tmp_path / "s", changelog, offset)
    assert store.restore_info["mode"] == "host-affinity" and dict(store.all()) == want
    store.close()
    elsewhere = opened(tmp_path / "t", changelog, offset)
    assert elsewhere.restore_info["mode"] == "rebuilt" and dict(elsewhere.all()) == want
    assert elsewhere.get("b" * 5000) is None
    assert elsewhere.get("b" * 5000 + "x") == names.index("b" * 5000 + "x")
    elsewhere.close()


def test_a_long_keys_value_changed_on_disk_is_detected(tmp_path):
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog)
    key = ("x" * 700, 1)
    store.put(key, 1)
    offset = commit(store, changelog)
    store.close()
    [(lk, raw)] = frame([(encode_key(key), pickle.dumps(1))])
    assert len(lk) == MAX_KEY and lk[:PREFIX + 1] == b"\x00" + encode_key(key)[:PREFIX]
    assert raw is not None
    assert flip_value(tmp_path / "s" / "data.mdb", lk, raw[-8:]) >= 1
    store = open_store(tmp_path / "s", changelog, offset)
    assert store.get(key) == 1
    store.close()


# -- through a job on the local system -----------------------------------------------------------

def last_counts(messages: list[Any]) -> dict[str, int]:
    return {m.key: m.value for m in messages}  # a key's messages are in one partition, in order


def test_a_flipped_count_on_disk_gives_the_right_count_after_a_rerun(tmp_path, caplog):
    """The count of a key, changed by one bit in the job's LMDB file between two runs, used to
    be read as it was: the second run's counts were silently wrong."""
    from examples.readwrite_counter import app, sample_input

    root = tmp_path / "job"
    config = {"job.dir": str(root)}
    events = sample_input(2000, ids=30)["events"]
    first, second = events[:1000], events[1000:]
    LocalRunner(app, config, inputs={"events": first}).run().close()
    counts = collections.Counter(e.key for e in first)
    key = next(k for k in sorted(counts) if counts[k] >= 10 and k in {e.key for e in second})
    files = [d / "data.mdb" for d in sorted((root / "stores" / "counts").iterdir())]
    flipped = [f for f in files
               if flip_value(f, b"\x00" + key.encode(), str(counts[key]).encode())]
    assert len(flipped) == 1
    job = LocalJob(app, config, run=False)
    job.load("events", second)
    job.close()
    with caplog.at_level(logging.WARNING, logger="samza_dsl"):
        runner = LocalRunner(app, config).run()
    try:
        want = collections.Counter(e.key for e in events)
        assert last_counts(runner.messages("counts")) == {
            k: want[k] for k in {e.key for e in second}}
        assert any(str(flipped[0]) in r.getMessage() and "fails its checksum" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
    finally:
        runner.close()


class CountOrDelete:
    """Counts each key in the table; an event ``{"delete": true}`` deletes its key."""

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("counts")

    def __call__(self, event: KV[str, dict[str, Any]]) -> KV[str, int]:
        if event.value.get("delete"):
            self.table.delete(event.key)
            return KV(event.key, 0)
        count = (self.table.get(event.key) or 0) + 1
        self.table.put(event.key, count)
        return KV(event.key, count)


def long_key_app() -> StreamApplication:
    app = StreamApplication("long-keys", config={"task.commit.ms": 1000})
    local = LocalSystem("local")
    serde = KVSerde(StringSerde(), JsonSerde())
    events = app.input(local.input("events", serde=serde, partitions=2))
    out = app.output(local.output("counts", serde=serde, partitions=2))
    app.table("counts", serde=serde)
    events.map(CountOrDelete(), name="count").send_to(out)
    return app


def test_keys_of_600_and_5000_bytes_in_a_jobs_table(tmp_path):
    """Such a key used to fail every run at its first flush, the run's outputs sent again by
    the next."""
    app = long_key_app()
    root = tmp_path / "job"
    config = {"job.dir": str(root)}
    names = ["s", "a" * 510, "a" * 600, "b" * 5000]

    def run(events: list[KV[str, Any]]) -> tuple[dict[str, int], set[str]]:
        job = LocalJob(app, config, run=False)
        job.load("events", events)
        job.close()
        runner = LocalRunner(app, config).run()
        try:
            modes = {info["mode"] for info in runner.job.state.restores.values()}
            return last_counts(runner.messages("counts")), modes
        finally:
            runner.close()

    counts = [KV(n, {}) for n in names]
    out, _ = run(counts * 3 + [KV("b" * 5000, {"delete": True}), KV("b" * 5000, {})])
    assert out == {"s": 3, "a" * 510: 3, "a" * 600: 3, "b" * 5000: 1}
    out, modes = run(counts)  # the local copies as they are
    assert modes == {"host-affinity"}
    assert out == {"s": 4, "a" * 510: 4, "a" * 600: 4, "b" * 5000: 2}
    shutil.rmtree(root / "stores")  # rebuilt from the changelogs
    out, modes = run(counts + [KV("a" * 600, {"delete": True})])
    assert "rebuilt" in modes and modes <= {"rebuilt", "fresh"}
    assert out == {"s": 5, "a" * 510: 5, "a" * 600: 0, "b" * 5000: 3}
    table: dict[str, Any] = {}
    for d in sorted((root / "stores" / "counts").iterdir()):
        store = LmdbStore.open(d, name="counts", task=d.name, key_encode=str.encode,
                               key_decode=bytes.decode, value_encode=msgspec.json.encode,
                               value_decode=msgspec.json.decode)
        table.update(store.all())
        store.close()
    assert table == {"s": 5, "a" * 510: 5, "b" * 5000: 3}


def test_without_cache_writes_a_flush_drops_what_it_wrote_from_the_cache(tmp_path):
    """``cache_writes = False``: a flushed value is read back from LMDB, never from a copy of
    it; a value cached by a read before the write is not given after it."""
    changelog = ListChangelog()
    store = open_store(tmp_path / "s", changelog)
    store.cache_writes = False
    store.put("a", 1)
    store.flush()
    assert store._clean == {}
    reads = store.reads
    assert store.get("a") == 1 and store.reads == reads + 1  # read from LMDB, then cached
    store.put("a", 2)
    store.flush()
    assert "a" not in store._clean and store.get("a") == 2
    store.delete("a")
    store.flush()
    assert store.get("a") is None
    commit(store, changelog)
    store.close()


# -- standby replicas and the tail replay ----------------------------------------------------------

def open_replica(path: Any) -> LmdbStore:
    return LmdbStore.open_replica(path, name="counts", task="Partition 0", key_encode=encode_key,
                                  key_decode=decode_key, value_encode=pickle.dumps,
                                  value_decode=pickle.loads)


def test_a_replica_fed_with_the_changelog_restores_only_the_tail_past_it(tmp_path, caplog):
    """A standby's replica holds the changelog up to its position; the task opened over it
    replays only the entries from there to the checkpoint, and holds the checkpoint's state."""
    changelog = ListChangelog(batch=50)
    active = open_store(tmp_path / "active", changelog)
    for i in range(1000):
        active.put(i, i)
    first = commit(active, changelog)
    replica = open_replica(tmp_path / "standby")
    assert replica.position == 0 and replica.restore_info["mode"] == "standby"
    replica.replicate(list(range(first)), changelog.log[:first], first)
    assert replica.position == first
    for i in range(0, 1000, 10):  # the active goes on: 100 updates and 5 deletes
        active.put(i, -i)
    for i in range(1, 6):
        active.delete(i)
    cp = commit(active, changelog)
    state = dict(active.all())
    replica.close()
    # the replica is reopened where it was (a member restarted) and the task moves there
    replica = open_replica(tmp_path / "standby")
    assert replica.position == first
    replica.close()
    caplog.set_level(logging.INFO, logger="samza_dsl.state")
    store = open_store(tmp_path / "standby", changelog, cp)
    info = store.restore_info
    assert info["mode"] == "tail" and info["from"] == first, info
    assert info["entries_replayed"] == cp - first == 105
    assert dict(store.all()) == state
    assert any(f"replayed {cp - first} changelog entries" in r.message for r in caplog.records)
    # committed at the checkpoint: the next start is a host-affinity one
    store.close()
    store = open_store(tmp_path / "standby", changelog, cp)
    assert store.restore_info["mode"] == "host-affinity" and dict(store.all()) == state
    store.close()
    active.close()


def test_a_replica_behind_the_checkpoint_is_trimmed_as_a_rebuild_is(tmp_path):
    """Entries past the checkpoint (a run that died before checkpointing) are compensated after
    the tail replay, as after a full rebuild."""
    changelog = ListChangelog()
    active = open_store(tmp_path / "active", changelog)
    for i in range(20):
        active.put(i, i)
    first = commit(active, changelog)
    replica = open_replica(tmp_path / "standby")
    replica.replicate(list(range(first)), changelog.log[:first], first)
    replica.close()
    active.put(0, 100)
    cp = commit(active, changelog)
    state = dict(active.all())
    active.put(1, 100)  # flushed, never checkpointed
    active.flush()
    changelog.flush_producer()
    active.close()
    store = open_store(tmp_path / "standby", changelog, cp)
    assert store.restore_info["mode"] == "tail" and store.restore_info["entries_replayed"] == 1
    assert store.restore_info["trimmed"] == 1 and dict(store.all()) == state
    changelog.flush_producer()
    assert decoded(changelog.replay()) == state
    store.close()


def test_a_replica_over_a_copy_it_cannot_trust_starts_empty(tmp_path):
    changelog = ListChangelog()
    active = open_store(tmp_path / "s", changelog)
    active.put(1, 1)
    active.flush()  # uncommitted
    active.close()
    replica = open_replica(tmp_path / "s")
    assert replica.position == 0 and list(replica.all()) == []
    replica.close()
