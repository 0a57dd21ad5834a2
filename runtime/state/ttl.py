"""Time to live of a table's entries (``app.table(..., ttl=...)``), a layer of every store's
bytes and of its cache, so that LMDB, memory, the changelog and every runner share it.

- **Bytes.** A value of a table with a ttl is stored as its write time (ms, 8 bytes, signed
  big-endian) before the bytes its serde writes, in the store and in its changelog alike
  (``ttl_codec``). A table without a ttl keeps the bytes it had before.
- **Time.** By default processing time: an entry's write time is the wall clock when it is
  put, and "now" is the wall clock. With ``ttl_event_time=fn`` the write time is ``fn(value)``
  (seconds) and "now" is the table's clock: the largest write time put into the task's store
  (Kafka Streams' stream time), found again from the entries held when the store opens. Event
  time gives the same answer on every runner and on a replay of the same writes; a write whose
  event time is already ``ttl`` behind the clock is expired at once.
- **Reads.** An entry with ``write time + ttl <= now`` is gone for ``get``, ``range``, ``all``
  and the table's other reads at once (``attach``).
- **Purge.** Each commit's flush then reads up to ``SWEEP`` entries' write times (not their
  values), from where the previous sweep stopped, round the store, and deletes those expired:
  a tombstone in the changelog, so compaction removes them there too.
- **Restore.** An entry replayed from the changelog that is expired by then is replayed as a
  tombstone (``expire_on_restore``), so a restore never brings one back. On event time the
  rebuilt table's clock is the largest write time replayed, of entries since overwritten or
  deleted too (``attach(..., restored=)``): an entry replayed before the write that expired it
  (its tombstone not written yet: a crash before the sweep reached it) stays expired.

>>> from samza_dsl.serdes import StringSerde
>>> enc, dec = ttl_codec(StringSerde().serialize, StringSerde().deserialize)
>>> enc((1700000000000, "x"))
b'\\x00\\x00\\x01\\x8b\\xcf\\xe5h\\x00x'
>>> dec(enc((1700000000000, "x")))
(1700000000000, 'x')
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from functools import partial
from operator import setitem
from typing import Any, cast

from operators.state import ListKey
from runtime.state.changelog import Check, Entries
from runtime.state.writeback import CachedStore, encode_all
from samza_dsl.errors import SamzaError

__all__ = ["HEADER", "SWEEP", "ttl_codec", "attach", "expire_on_restore", "write_time",
           "table_ttl", "processing_ttl_ms", "RestoreExpiry"]

HEADER = 8
#: entries whose write times a commit reads to find expired ones: a store of n entries is
#: swept round once every n / SWEEP commits
SWEEP = 50_000
_STAMP = struct.Struct(">q")
_pack, _unpack_from = _STAMP.pack, _STAMP.unpack_from


def ttl_codec(value_encode: Callable[[Any], bytes], value_decode: Callable[[bytes], Any]
              ) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """(encode, decode) of ``(write time ms, value)`` with a table's value codec: the write
    time's 8 bytes, then the value's bytes. ``encode.many`` encodes a flush at once."""

    def encode(entry: tuple[int, Any]) -> bytes:
        return _pack(entry[0]) + value_encode(entry[1])

    def many(entries: list[tuple[int, Any]]) -> list[bytes]:
        bodies = encode_all(value_encode, [e[1] for e in entries])
        return [_pack(e[0]) + b for e, b in zip(entries, bodies, strict=True)]

    def decode(data: bytes) -> tuple[int, Any]:
        if len(data) < HEADER:
            raise ValueError(f"{len(data)} bytes, shorter than the write time a table with a "
                             f"ttl stores before each value")
        return _unpack_from(data)[0], value_decode(data[HEADER:])

    encode.many = many  # type: ignore[attr-defined]
    return encode, decode


def write_time(vb: bytes) -> int:
    """The write time (ms) held in a stored value's bytes."""
    return cast(int, _unpack_from(vb)[0])


def table_ttl(plan: Any, store_name: str) -> Any:
    """The ``TableSpec`` of store ``store_name`` of ``plan`` where it has a ttl, else None."""
    spec = plan.stores[store_name]
    table = spec.table
    return table if table is not None and table.ttl_ms is not None else None


def processing_ttl_ms(plan: Any, store_name: str) -> int | None:
    """The ttl (ms) of store ``store_name``'s table where it is on processing time (the
    default), else None: its changelog's records may then go that long after they were appended,
    whatever their keys (every put in them has expired for every reader by then, and every
    tombstone deletes only such puts), as ``runtime.local.compaction`` does on the embedded log
    and a changelog topic's ``cleanup.policy=compact,delete`` does on Kafka."""
    table = table_ttl(plan, store_name)
    if table is None or table.ttl_event_time is not None:
        return None
    return int(table.ttl_ms)


def _event_ms(fn: Callable[[Any], float], table: str) -> Callable[[Any], int]:
    def ms(value: Any) -> int:
        try:
            t = fn(value)
            if isinstance(t, bool) or not isinstance(t, int | float) or t != t:
                raise TypeError(f"returned {t!r} ({type(t).__name__}), not a number of seconds")
            return int(round(t * 1000))
        except Exception as e:
            raise SamzaError(
                f"table {table!r}: ttl_event_time failed on the value {value!r:.200} "
                f"({type(e).__name__}: {e}); it must give every value's event time in "
                f"seconds") from e
    return ms


class _Clock:
    """"Now" of a table's entries, in ms: the wall clock, or the largest event time written."""

    __slots__ = ("event", "now_ms", "wall")

    def __init__(self, event: bool, wall: Callable[[], float]) -> None:
        self.event = event
        self.now_ms = -(1 << 62)
        self.wall = wall

    def now(self) -> int:
        return self.now_ms if self.event else int(self.wall() * 1000)


def attach(store: CachedStore, spec: Any, wall: Callable[[], float] = time.time,
           restored: RestoreExpiry | None = None) -> None:
    """Makes ``store`` (whose value codec is ``ttl_codec``'s: its cache holds ``(write time,
    value)``) a table with ``spec.ttl_ms``: ``get``, ``put``, the entries a scan gives, and a
    sweep at each commit's flush (see the module docstring). ``restored``: the check its
    restore replayed the changelog through, whose largest write time the clock starts from."""
    ttl = int(spec.ttl_ms)
    clock = _Clock(spec.ttl_event_time is not None, wall)
    dirty = store._dirty
    get_entry = dirty.__getitem__
    set_entry = partial(setitem, dirty)
    kdec = store._kdec
    byte_store = store.byte_store
    if clock.event:
        event_ms = _event_ms(spec.ttl_event_time, spec.table_id)
        # the table's clock goes on from the largest write time held or replayed: a write
        # since overwritten by an earlier one, or deleted, still moved it
        if restored is not None:
            clock.now_ms = restored.latest_ms
        for _kb, t in byte_store.scan(None, None, _stamp_entry):
            if t > clock.now_ms:
                clock.now_ms = t

        def put(key: Any, value: Any) -> None:
            t = event_ms(value)
            if t > clock.now_ms:
                clock.now_ms = t
            set_entry(key, (t, value))

        def get(key: Any) -> Any:
            e = get_entry(key)
            if e is None or e[0] + ttl <= clock.now_ms:
                return None
            return e[1]
    else:
        wall_ms = clock.now

        def put(key: Any, value: Any) -> None:
            set_entry(key, (wall_ms(), value))

        def get(key: Any) -> Any:
            e = get_entry(key)
            if e is None or e[0] + ttl <= wall_ms():
                return None
            return e[1]

    inner = store.decode_entry

    def decode_entry(kb: bytes, vb: bytes) -> tuple[Any, Any]:
        k, e = inner(kb, vb)
        if e is None or e[0] + ttl <= clock.now():
            return k, None
        return k, e[1]

    cursor: list[bytes | None] = [None]

    def sweep() -> None:
        """Deletes the expired entries among the next ``SWEEP`` of the bytes (after a flush:
        no entry is dirty)."""
        cutoff = clock.now() - ttl
        expired: list[bytes] = []
        nxt = None
        for seen, (kb, t) in enumerate(byte_store.scan(cursor[0], None, _stamp_entry), 1):
            if t <= cutoff:
                expired.append(kb)
            if seen >= SWEEP:
                nxt = kb + b"\x00"  # the first key after it
                break
        cursor[0] = nxt
        if not expired:
            return
        byte_store.writable(len(expired))
        byte_store.write([(kb, None) for kb in expired])
        store.deletes += len(expired)
        store.expired += len(expired)
        clean = store._clean
        for kb in expired:
            try:
                k = kdec(kb)
                clean.pop(ListKey(k) if type(k) is list else k, None)
            except Exception:  # noqa: BLE001 - never cached then; reads filter it anyway
                pass

    def live_value(e: tuple[int, Any] | None) -> Any:
        if e is None or e[0] + ttl <= clock.now():
            return None
        return e[1]

    store.get = get
    store.put = put
    store.decode_entry = decode_entry
    store.sweep = sweep
    # what ``peek`` and ``decode_value`` give a reader from outside the job (an interactive
    # query, ``runtime.engine.query_read``): the same
    store.live_value = live_value


def _stamp_entry(kb: bytes, vb: bytes) -> tuple[bytes, int]:
    """A scan's entry as a sweep reads it: the key's bytes and the write time, nothing decoded."""
    return kb, cast(int, _unpack_from(vb)[0])


class RestoreExpiry:
    """The changelog check of a table with a ttl (``expire_on_restore``); ``latest_ms`` is the
    largest write time it replayed, for the table's clock (``attach(..., restored=)``)."""

    __slots__ = ("check", "ttl", "event", "wall", "latest_ms")

    def __init__(self, check: Check | None, spec: Any, wall: Callable[[], float]) -> None:
        self.check = check
        self.ttl = int(spec.ttl_ms)
        self.event = spec.ttl_event_time is not None
        self.wall = wall
        self.latest_ms = -(1 << 62)

    def __call__(self, offsets: int | Sequence[int], entries: Entries) -> Entries:
        if self.check is not None:
            entries = self.check(offsets, entries)
        ttl, event = self.ttl, self.event
        now = int(self.wall() * 1000)
        latest = self.latest_ms
        out: Entries = []
        for kb, vb in entries:
            if vb is not None and len(vb) >= HEADER:
                t = write_time(vb)
                if event:
                    if t > latest:
                        latest = t
                    now = latest
                if t + ttl <= now:
                    vb = None
            out.append((kb, vb))
        self.latest_ms = latest
        return out


def expire_on_restore(check: Check | None, spec: Any, wall: Callable[[], float] = time.time
                      ) -> RestoreExpiry:
    """The changelog check of a table with a ttl: entries already expired when replayed go in
    as tombstones (on event time, expired by the largest write time replayed so far). An entry
    replayed before the write that expired it is caught by the clock instead: ``attach`` with
    ``restored=`` starts the table's clock at the largest write time replayed, entries since
    overwritten included."""
    return RestoreExpiry(check, spec, wall)
