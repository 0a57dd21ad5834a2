"""A task's store is the same layers over any bytes: the write-back cache, encoding and
metrics (``CachedStore``) over the changelog layer (``LoggedBytes``) over a byte store, LMDB's
or memory's (docs/architecture.md, ``runtime.state.bytestore``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from operators.state import decode_key, encode_key
from runtime.state.bytestore import LoggedBytes
from runtime.state.lmdb_store import LmdbBytes, LmdbStore
from runtime.state.memory_store import MemoryBytes, MemoryStore
from runtime.state.writeback import CachedStore, store_samples
from samza_dsl.serdes import JsonSerde

Entry = tuple[bytes, bytes | None]
_V: JsonSerde[Any] = JsonSerde()


class ListChangelog:
    """A changelog partition in a list; ``append`` is durable at once."""

    def __init__(self) -> None:
        self.log: list[Entry] = []

    def append(self, entries: list[Entry]) -> None:
        self.log.extend(entries)

    def end_offset(self) -> int:
        return len(self.log)

    def read(self, start: int, end: int) -> Iterator[tuple[int, list[Entry]]]:
        if start < min(end, len(self.log)):
            yield start, self.log[start:end]


def _codecs() -> dict[str, Any]:
    return {"key_encode": encode_key, "key_decode": decode_key,
            "value_encode": _V.serialize, "value_decode": _V.deserialize}


def _work(store: CachedStore) -> list[tuple[object, object]]:
    """Writes, deletes and reads through a small cache, flushing twice; what ``all`` gives."""
    for i in range(20):
        store.put(("k", i % 7), {"n": i})
        if i % 5 == 4:
            store.delete(("k", (i + 3) % 7))
        store.maybe_flush()
    store.flush()
    store.put(("z", 0), [1, 2])
    store.flush()
    assert store.get(("k", 3)) == {"n": 17}
    return list(store.all())


def test_memory_bytes_under_the_changelog_layer_log_what_lmdb_logs(tmp_path: Path) -> None:
    lmdb_log, memory_log = ListChangelog(), ListChangelog()
    lmdb = LmdbStore.open(tmp_path / "s", name="t", task="Partition 0", changelog=lmdb_log,
                          cache_size=3, write_batch_size=2, **_codecs())
    memory = CachedStore(LoggedBytes(MemoryBytes("t", "Partition 0"), memory_log), name="t",
                         task="Partition 0", cache_size=3, write_batch_size=2,
                         **_codecs())
    assert _work(memory) == _work(lmdb)
    assert memory_log.log == lmdb_log.log and len(lmdb_log.log) > 8
    # the changelog the in-memory bytes wrote restores the LMDB store they agree with
    lmdb.mark_committed(lmdb_log.end_offset())
    lmdb.close()
    restored = LmdbStore.open(tmp_path / "r", name="t", task="Partition 0", changelog=memory_log,
                              checkpointed=memory_log.end_offset(),
                              **_codecs())
    try:
        assert restored.restore_info["mode"] == "rebuilt"
        assert list(restored.all()) == list(memory.all())
    finally:
        restored.close()


def test_every_store_is_the_same_layers_with_the_same_metrics(tmp_path: Path) -> None:
    changelog = ListChangelog()
    logged = LmdbStore.open(tmp_path / "a", name="t", task="Partition 0", changelog=changelog,
                            **_codecs())
    local = LmdbStore.open(tmp_path / "b", name="t", task="Partition 0",
                           **_codecs())
    memory = MemoryStore(name="t", task="Partition 0", **_codecs())
    try:
        assert isinstance(logged.byte_store, LoggedBytes)
        assert isinstance(logged.byte_store.inner, LmdbBytes)
        assert isinstance(local.byte_store, LmdbBytes)
        assert isinstance(memory.byte_store, MemoryBytes)
        for store in (logged, local, memory):
            # the hot path is the dirty entries' own lookup: no layer's frame on it
            assert store.get.__self__ is store._dirty  # type: ignore[attr-defined]
            _work(store)
            assert store.get(("absent", 0)) is None  # read from the bytes, then cached
            assert store.get(("absent", 0)) is None
        counts = [[(name, n) for _, name, _, n in store_samples("Partition 0", s)
                   if name != "bytes"] for s in (logged, local, memory)]
        assert counts[0] == counts[1] == counts[2] == [("gets", 1), ("puts", 7), ("deletes", 1)]
    finally:
        logged.close()
        local.close()
