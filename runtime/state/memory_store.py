"""A task's store in memory, for ``TestRunner`` and Spark: the job's store
(``runtime.state.lmdb_store``) with its bytes in a dict (``MemoryBytes``) in place of an LMDB
file, and no changelog.

It keeps what the LMDB store keeps and encodes it as that does: the same write-back layer
(``runtime.state.writeback``: dirty entries in front, encoded at ``flush``, ``maybe_flush`` once
``write_batch_size`` keys are dirty, and before ``range`` and ``all``; a clean cache of decoded
objects behind) over the same codecs (``runtime.state.codec.store_codecs``). So an entry the
job's store cannot encode fails here too, with the same line but for where the store is ("in
memory"), and what is read back once the object cache has let it go is what its serdes decode
(a tuple value under ``JsonSerde`` comes back a list, a tuple key an ``operators.state.ListKey``). ``range`` and
``all`` give keys in the byte order of their encoding, as LMDB does.

>>> from operators.state import decode_key, encode_key
>>> from samza_dsl.serdes import SafeSerde
>>> v = SafeSerde()
>>> s = MemoryStore(name="counts", task="Partition 0", key_encode=encode_key,
...                 key_decode=decode_key, value_encode=v.serialize, value_decode=v.deserialize)
>>> s.put(("b", 2), 20); s.put(("a", 1), 10); s.delete(("b", 2))
>>> s.get(("a", 1)), s.get(("b", 2)), len(s)
(10, None, 1)
>>> list(s.all())
[(('a', 1), 10)]
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from typing import Any

from runtime.engine.job import TaskModel
from runtime.engine.systems import StateBackend
from runtime.host.metrics import Sample
from runtime.state.bytestore import DecodeEntry
from runtime.state.changelog import Entries
from runtime.state.codec import store_codecs, store_key_check
from runtime.state.ttl import attach as attach_ttl
from runtime.state.ttl import table_ttl
from runtime.state.writeback import CachedStore, store_samples, store_sizes
from samza_dsl.jobconfig import JobConfig

__all__ = ["MemoryBytes", "MemoryStore", "MemoryStores"]

#: new or deleted keys a flush places in the sorted keys one by one; past it they are sorted
#: again at the next ``range`` or ``all``
_PLACE_MAX = 64


class MemoryBytes:
    """The bytes of a task's store in memory (a ``runtime.state.bytestore.ByteStore``): the
    encoded entries in a dict, and their keys in byte order."""

    __slots__ = ("name", "task", "_data", "_order", "_stale", "committed", "flushes")

    def __init__(self, name: str, task: str) -> None:
        self.name = name
        self.task = task
        #: the encoded entries, and their keys in byte order (when not ``_stale``)
        self._data: dict[bytes, bytes] = {}
        self._order: list[bytes] = []
        self._stale = False
        self.committed = True
        self.flushes = 0

    def where(self) -> str:
        return f"store {self.name!r} of task {self.task!r} in memory"

    def get(self, key: Any, kb: bytes) -> bytes | None:
        return self._data.get(kb)

    def holds(self, kb: bytes) -> bool:
        return kb in self._data

    def count(self) -> int:
        return len(self._data)

    def writable(self, changes: int) -> None:
        return None  # always

    def write(self, entries: Entries) -> None:
        data = self._data
        self.flushes += 1
        self.committed = False
        if self._stale:  # the keys are sorted again when next read in order: no keys to place
            pop = data.pop
            for kb, vb in entries:
                if vb is None:
                    pop(kb, None)
                else:
                    data[kb] = vb
            return
        placed: list[bytes] = []  # keys added or removed
        for kb, vb in entries:
            if vb is None:
                if data.pop(kb, None) is not None:
                    placed.append(kb)
            else:
                if kb not in data:
                    placed.append(kb)
                data[kb] = vb
        if placed and not self._stale:
            if len(placed) > _PLACE_MAX:
                self._stale = True
            else:
                order = self._order
                for kb in set(placed):
                    i = bisect_left(order, kb)
                    held = i < len(order) and order[i] == kb
                    if kb in data and not held:
                        order.insert(i, kb)
                    elif kb not in data and held:
                        del order[i]

    def _sorted(self) -> list[bytes]:
        if self._stale:
            self._order = sorted(self._data)
            self._stale = False
        return self._order

    def scan(self, lo: bytes | None, hi: bytes | None,
             decode_entry: DecodeEntry) -> Iterator[tuple[Any, Any]]:
        """The entries whose encoded keys are in [lo, hi) (None: no bound) in their order, each
        value current as it is reached: after a flush meanwhile, the keys are looked up again
        past the last one given."""
        if lo is not None and hi is not None and lo >= hi:
            return
        data = self._data
        pos, inclusive = lo, True
        while True:
            flushes = self.flushes
            order = self._sorted()
            i = 0 if pos is None else (bisect_left if inclusive else bisect_right)(order, pos)
            j = len(order) if hi is None else bisect_left(order, hi)
            for kb in order[i:j]:
                if self.flushes != flushes:  # the keys changed: look them up again
                    break
                pos, inclusive = kb, False
                vb = data.get(kb)
                if vb is None:
                    continue
                k, v = decode_entry(kb, vb)
                if v is not None:
                    yield k, v
            else:
                return

    def size_bytes(self) -> int:
        """The bytes of its encoded keys and values."""
        return sum(len(k) + len(v) for k, v in self._data.items())

    def flushed(self) -> None:
        return None

    def mark_committed(self, changelog_offset: int | None) -> None:
        """The commit is done (no changelog: nothing to record)."""
        self.committed = True

    def close(self) -> None:
        """Nothing to release."""


class MemoryStore(CachedStore):
    """One task's store in memory: see the module docstring. Its layers are the job's
    (``runtime.state.writeback.CachedStore``) over ``MemoryBytes``."""

    __slots__ = ()

    byte_store: MemoryBytes

    def __init__(self, *, name: str, task: str, key_encode: Callable[[Any], bytes],
                 key_decode: Callable[[bytes], Any], value_encode: Callable[[Any], bytes],
                 value_decode: Callable[[bytes], Any], cache_size: int = 100_000,
                 write_batch_size: int = 10_000) -> None:
        super().__init__(MemoryBytes(name, task), name=name, task=task, key_encode=key_encode,
                         key_decode=key_decode, value_encode=value_encode,
                         value_decode=value_decode, cache_size=cache_size,
                         write_batch_size=write_batch_size)

    @property
    def committed(self) -> bool:
        return self.byte_store.committed

    def __repr__(self) -> str:
        return (f"MemoryStore({self.name!r}, task={self.task!r}, {self.byte_store.count()} entries, "
                f"{len(self._dirty)} dirty, {len(self._clean)} cached)")


class MemoryStores(StateBackend):
    """The state backend of a run in memory: a ``MemoryStore`` for each (task, store) of
    ``plan``, with the codecs and sizes the job's stores have, flushed at every commit as the
    job's are. Called as ``stores(task_name, store_name)`` it is a store factory too.
    ``cache_size``: the object cache of a store whose config sets none (the job's default
    where None)."""

    def __init__(self, plan: Any, config: JobConfig | None = None, *,
                 cache_size: int | None = None) -> None:
        self.plan = plan
        self.config: JobConfig = plan.config if config is None else config
        self.cache_size = cache_size
        self.stores: dict[tuple[str, str], MemoryStore] = {}

    def __call__(self, task_name: str, store_name: str) -> MemoryStore:
        key = (task_name, store_name)
        store = self.stores.get(key)
        if store is None:
            ke, kd, ve, vd = store_codecs(self.plan, store_name)
            cache_size, write_batch_size = store_sizes(self.config, store_name, self.cache_size)
            store = MemoryStore(name=store_name, task=task_name, key_encode=ke, key_decode=kd,
                                value_encode=ve, value_decode=vd, cache_size=cache_size,
                                write_batch_size=write_batch_size)
            store.check_key = store_key_check(self.plan, store_name)
            ttl = table_ttl(self.plan, store_name)
            if ttl is not None:
                attach_ttl(store, ttl)
            self.stores[key] = store
        return store

    def open(self, task: TaskModel, store_name: str, checkpointed: int | None) -> MemoryStore:
        return self(task.name, store_name)

    def _of(self, task_name: str) -> list[MemoryStore]:
        return [s for (t, _), s in self.stores.items() if t == task_name]

    def flush(self, task_name: str) -> None:
        for store in self._of(task_name):
            store.flush()

    def committed(self, task_name: str) -> dict[str, int]:
        for store in self._of(task_name):
            store.mark_committed(None)
        return {}

    def samples(self) -> list[Sample]:
        """Per store of each task: reads of its bytes, values and deletes written, its bytes."""
        out: list[Sample] = []
        for (task_name, _), store in list(self.stores.items()):
            out += store_samples(task_name, store)
        return out

    def close(self) -> None:
        return None
