"""What a store's changelog is to the store: the partition the runtime gives ``LmdbStore.open``
(``Changelog``), and the check a changelog batch passes before it is replayed (``Check``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

__all__ = ["Changelog", "Check", "Entries"]

#: ``(encoded key, encoded value)`` pairs; ``(key, None)`` is a tombstone
Entries = list[tuple[bytes, bytes | None]]
#: ``check(offsets, entries)``: the entries of a changelog batch to replay (or raises), with
#: ``offsets`` as ``Changelog.read`` gives them; the runtime decodes them there, so an entry that
#: does not decode meets its serde error policy before it reaches the store
Check = Callable[[int | Sequence[int], Entries], Entries]


class Changelog(Protocol):
    """A store's changelog partition, as the runtime gives it to ``LmdbStore.open``."""

    def append(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        """Buffers ``(key, value)`` entries (``(key, None)`` is a tombstone); they are durable
        once the runtime flushes its producer."""
        ...

    def end_offset(self) -> int:
        """The next offset of the partition, counting durable entries only."""
        ...

    def read(self, start: int, end: int
             ) -> Iterator[tuple[int | Sequence[int], list[tuple[bytes, bytes | None]]]]:
        """Batches of the entries with offsets in ``[start, end)``: ``(offset of the batch's
        first entry, entries)`` when their offsets follow on, else ``(each entry's offset,
        entries)`` (a compacted changelog has gaps)."""
        ...
