"""The bottom of every store's layers: ``ByteStore``, a store of encoded keys and values in
their byte order (LMDB's ``runtime.state.lmdb_store.LmdbBytes``, memory's
``runtime.state.memory_store.MemoryBytes``), with the hooks a commit calls; and
``LoggedBytes``, the changelog layer over one, which appends each flush's entries to the
store's changelog.

The layers a task's store is made of, top to bottom (Kafka Streams' metered, caching and
logging stores are the model):

- ``runtime.state.writeback.CachedStore``: the store interface operators and tables see, with
  its metrics, the write-back cache of decoded objects and the encoding at a flush (one layer:
  a dirty or cached ``get`` stays a dict's own ``__getitem__``, no Python frame);
- ``LoggedBytes`` (a store with a changelog): each flush's entries appended to the changelog;
- a ``ByteStore``: LMDB, or a dict in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from runtime.state.changelog import Changelog, Entries

__all__ = ["ByteStore", "DecodeEntry", "LoggedBytes"]

#: ``decode_entry(kb, vb)``: what a scan gives for an entry it reads (the caching layer's: a
#: key decoded, its value as ``get`` gives it now; a None value is skipped)
DecodeEntry = Callable[[bytes, bytes], tuple[Any, Any]]


class ByteStore(Protocol):
    """A store of encoded keys and values, in the byte order of the keys."""

    @property
    def flushes(self) -> int:
        """Writes so far: a scan that sees it change reads on from the last key it gave."""
        ...

    def where(self) -> str:
        """The store, as errors name it."""
        ...

    def get(self, key: Any, kb: bytes) -> bytes | None:
        """The value bytes of ``key`` (encoded ``kb``; ``key`` names it in errors), None where
        there are none."""
        ...

    def holds(self, kb: bytes) -> bool:
        """Whether a value is held under ``kb``."""
        ...

    def count(self) -> int:
        """The number of keys held."""
        ...

    def writable(self, changes: int) -> None:
        """Raises where ``changes`` entries cannot be written now (a closed store)."""
        ...

    def write(self, entries: Entries) -> None:
        """Writes a flush's encoded entries (a None value deletes its key)."""
        ...

    def scan(self, lo: bytes | None, hi: bytes | None,
             decode_entry: DecodeEntry) -> Iterator[tuple[Any, Any]]:
        """The entries with encoded keys in ``[lo, hi)`` (None: no bound) in their byte order,
        each through ``decode_entry`` as it is reached (so values are current), those it gives
        a None value skipped. Writing while scanning is safe."""
        ...

    def size_bytes(self) -> int:
        """The bytes it holds."""
        ...

    # -- the commit's hooks ---------------------------------------------------------------------

    def flushed(self) -> None:
        """A commit's flush is done: ``mark_committed`` follows unless a write comes between."""
        ...

    def mark_committed(self, changelog_offset: int | None) -> None:
        """The commit is done: the store holds its changelog up to ``changelog_offset`` (None
        without a changelog)."""
        ...

    def close(self) -> None:
        """Lets go of what it holds open. Idempotent."""
        ...


class LoggedBytes:
    """The changelog layer over ``inner``: each write's entries are appended to ``changelog``
    after ``inner`` holds them (durable at the runtime's producer flush). Everything else is
    ``inner``'s own method, bound here: a read costs no frame of this layer."""

    __slots__ = ("inner", "changelog", "where", "get", "holds", "count", "writable", "scan",
                 "size_bytes", "flushed", "mark_committed", "close")

    def __init__(self, inner: ByteStore, changelog: Changelog) -> None:
        self.inner = inner
        self.changelog = changelog
        self.where = inner.where
        self.get = inner.get
        self.holds = inner.holds
        self.count = inner.count
        self.writable = inner.writable
        self.scan = inner.scan
        self.size_bytes = inner.size_bytes
        self.flushed = inner.flushed
        self.mark_committed = inner.mark_committed
        self.close = inner.close

    @property
    def flushes(self) -> int:
        return self.inner.flushes

    def write(self, entries: Entries) -> None:
        self.inner.write(entries)
        self.changelog.append(entries)
