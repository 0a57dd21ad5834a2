"""Hypothesis strategies for a whole application's inputs: several keyed streams drawn at once,
over one small pool of keys (so joins meet), with event times of a declared bounded disorder,
and updates of tables (as a side input or a changelog-like input delivers them, a None value
deleting the key).

``keyed_inputs`` draws a ``KeyedInputs``: the messages of each stream by stream id, the table
updates by the stream id that carries them, and what a plain-Python answer needs (each
message's key, event time and value; a table's final contents). ``drawn.feed(runner)`` gives
them all to a ``TestRunner``, as lists, so each message goes to the partition the job's
partitioner gives its key: a key's messages are in one partition of each stream, in the order
drawn, and the same key is in the same partition of every stream of the same partition count.

Everything shrinks towards small: fewer keys, each as ``keys`` shrinks it (``"k0"`` by
default), fewer messages and updates, values as their strategy shrinks them, event times at
``start`` and the least disorder, so a failing case is reported as a minimal one.

Example:
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=10)
    ... @given(keyed_inputs(["views", "clicks"], max_keys=3, max_disorder=2.0,
    ...                     tables={"profile-updates": st.integers()}))
    ... def check(drawn):
    ...     keys = {e.key for es in drawn.events.values() for e in es}
    ...     assert keys <= set(drawn.keys) and len(drawn.keys) <= 3
    ...     assert set(drawn.table("profile-updates")) <= set(drawn.keys)
    >>> check()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from hypothesis import strategies as st

from samza_dsl.kv import KV

__all__ = ["keyed_inputs", "KeyedInputs", "Event", "timed_kv"]

#: The keys drawn by default: ``"k0"`` to ``"k99"`` (strings, for a ``StringSerde`` or
#: ``JsonSerde`` key), shrinking towards ``"k0"``.
DEFAULT_KEYS: st.SearchStrategy[Any] = st.integers(0, 99).map(lambda i: f"k{i}")


class Event(NamedTuple):
    """One drawn message before it is built: its key, event time (seconds) and value.

    Example:
        >>> e = Event("k0", 1700000000.5, 3)
        >>> e.key, e.time, timed_kv(*e)
        ('k0', 1700000000.5, KV(key='k0', value={'time': 1700000000.5, 'value': 3}))
    """

    key: Any
    time: float
    value: Any


def timed_kv(key: Any, time: float, value: Any) -> KV[Any, dict[str, Any]]:
    """The message ``keyed_inputs`` builds by default: ``KV(key, {"time": time, "value": value})``,
    which a ``JsonSerde`` keeps and ``event_time=lambda kv: kv.value["time"]`` reads.

    Example:
        >>> timed_kv("k0", 1700000000.5, 3)
        KV(key='k0', value={'time': 1700000000.5, 'value': 3})
    """
    return KV(key, {"time": time, "value": value})


class _Runner(Protocol):
    def add_input(self, descriptor: Any, messages: Any, /) -> Any: ...


R = TypeVar("R", bound=_Runner)


@dataclass(frozen=True)
class KeyedInputs:
    """The inputs ``keyed_inputs`` drew.

    Attributes:
        keys: Every distinct key of the draw (of the streams and the tables), from the one
            pool of keys they were all drawn from.
        events: Per stream id, its messages as ``Event(key, time, value)``, in the order drawn.
        streams: Per stream id, its messages as built (``timed_kv`` by default), in that order.
        updates: Per stream id carrying a table's updates, ``KV(key, value)`` in order; a None
            value deletes the key.
        order: The stream id of each message, in the one order over every stream that the
            event times were drawn along (``TestRunner`` hands out its inputs in its own order).
        max_disorder: The declared bound: no event time is more than this many seconds
            before one drawn earlier in ``order``, of any stream.

    Example:
        >>> drawn = KeyedInputs(keys=("k0",), events={"s": (Event("k0", 5.0, 1),)},
        ...                     streams={"s": (timed_kv("k0", 5.0, 1),)},
        ...                     updates={"t": (KV("k0", "a"), KV("k0", None))}, order=("s",),
        ...                     max_disorder=0.0)
        >>> drawn.table("t"), drawn.shared_keys("s")
        ({}, {'k0'})
    """

    keys: tuple[Any, ...]
    events: Mapping[str, tuple[Event, ...]]
    streams: Mapping[str, tuple[Any, ...]]
    updates: Mapping[str, tuple[KV[Any, Any], ...]]
    order: tuple[str, ...]
    max_disorder: float

    def feed(self, runner: R) -> R:
        """Add every stream and every table's updates to ``runner`` (a ``TestRunner``) by
        stream id, as lists, so each message goes to its key's partition as in the job.

        Returns:
            ``runner``, so calls chain: ``drawn.feed(TestRunner(app)).run()``.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("fed"), MemorySystem()
            >>> serde = KVSerde(StringSerde(), JsonSerde())
            >>> trips = mem.input("trips", serde=serde, partitions=2)
            >>> app.input(trips).send_to(app.output(mem.output("out", serde=serde)))
            >>> drawn = KeyedInputs(keys=("k0",), events={"trips": (Event("k0", 5.0, 1),)},
            ...                     streams={"trips": (timed_kv("k0", 5.0, 1),)}, updates={},
            ...                     order=("trips",), max_disorder=0.0)
            >>> drawn.feed(TestRunner(app)).run().messages("out")
            [KV(key='k0', value={'time': 5.0, 'value': 1})]
        """
        for sid, messages in {**self.streams, **self.updates}.items():
            runner.add_input(sid, list(messages))
        return runner

    def table(self, stream: str) -> dict[Any, Any]:
        """The contents of a table after the updates ``stream`` carries, in order (a None value
        deletes its key): what a lookup finds once the table has them all.

        Raises:
            KeyError: ``stream`` carries no drawn table updates.
        """
        if stream not in self.updates:
            raise KeyError(f"{stream!r} carries no drawn table updates; these do: "
                           f"{', '.join(sorted(self.updates)) or 'none'}")
        out: dict[Any, Any] = {}
        for kv in self.updates[stream]:
            if kv.value is None:
                out.pop(kv.key, None)
            else:
                out[kv.key] = kv.value
        return out

    def shared_keys(self, *streams: str) -> set[Any]:
        """The keys with at least one message in every one of ``streams``: those a join of
        them can meet on."""
        sets = [{e.key for e in self.events[s]} for s in streams]
        return set.intersection(*sets) if sets else set()


def keyed_inputs(streams: Mapping[str, st.SearchStrategy[Any]] | Sequence[str], *,
                 keys: st.SearchStrategy[Any] = DEFAULT_KEYS, max_keys: int = 4,
                 min_size: int = 0, max_size: int = 10,
                 unique_keys: bool | Iterable[str] = False,
                 start: float = 1_700_000_000.0, max_step: float = 1.0,
                 max_disorder: float = 0.0,
                 message: Callable[[Any, float, Any], Any] = timed_kv,
                 tables: Mapping[str, st.SearchStrategy[Any]] | None = None,
                 max_updates: int = 10, deletes: bool = True) -> st.SearchStrategy[KeyedInputs]:
    """Several keyed streams drawn at once, with shared keys, bounded disorder and table updates.

    The keys of every stream and table come from one pool of up to ``max_keys`` distinct keys,
    so the streams share keys and joins and lookups meet. The streams' messages are
    interleaved in one drawn order, and event times move forward along it by up to
    ``max_step`` seconds per message, each at most ``max_disorder`` seconds before the latest
    one so far: declare ``max_out_of_orderness`` of at least ``max_disorder`` on the inputs and
    none of these messages is late.

    Args:
        streams: The stream ids, with the strategy of each one's values (a list of ids: ints
            0 to 9).
        keys: The strategy of keys; by default ``"k0"`` to ``"k99"``.
        max_keys: The most distinct keys of a draw: the fewer, the more often keys meet.
        min_size: The fewest messages per stream.
        max_size: The most messages per stream.
        unique_keys: True, or the ids of the streams in which each key has at most one
            message (a request or a trip by its id), so a join has one pair per key.
        start: The event time the first step starts from, in seconds.
        max_step: The most the latest event time moves forward per message, in seconds.
        max_disorder: The most an event time lies before an earlier one, in seconds (0: in
            order).
        message: ``message(key, time, value)`` builds each message; by default ``timed_kv``.
        tables: The ids of the streams that carry table updates (a side input, or an input
            sent to the table), with the strategy of the values put.
        max_updates: The most updates per table.
        deletes: Whether updates include deletes (``KV(key, None)``).

    Returns:
        A strategy of ``KeyedInputs``.

    Raises:
        ValueError: No stream, a stream id used twice, a size or bound out of range, or a
            unique-keys stream that cannot have ``min_size`` messages of ``max_keys`` keys.

    Example:
        >>> from hypothesis import given, settings
        >>> @settings(max_examples=10)
        ... @given(keyed_inputs(["requests", "acceptances"], unique_keys=True, min_size=1,
        ...                     max_disorder=4.0))
        ... def check(drawn):
        ...     for events in drawn.events.values():
        ...         assert len({e.key for e in events}) == len(events) >= 1
        ...         assert all(e.time >= max(f.time for f in events[:i + 1]) - 4.0
        ...                    for i, e in enumerate(events))
        >>> check()
    """
    if isinstance(streams, str):
        raise ValueError(f"keyed_inputs: streams is a list of stream ids or a mapping of them "
                         f"to value strategies, got the string {streams!r}")
    values = (dict(streams) if isinstance(streams, Mapping)
              else {s: st.integers(0, 9) for s in streams})
    names = list(streams)
    table_values = dict(tables or {})
    unique = set(names) if unique_keys is True else set(unique_keys or ())
    _check(names, table_values, unique, max_keys=max_keys, min_size=min_size,
           max_size=max_size, max_step=max_step, max_disorder=max_disorder,
           max_updates=max_updates)
    return _draw(values, table_values, unique, keys=keys, max_keys=max_keys, min_size=min_size,
                 max_size=max_size, start=start, max_step=max_step, max_disorder=max_disorder,
                 message=message, max_updates=max_updates, deletes=deletes)


def _check(names: list[str], tables: Mapping[str, Any], unique: set[str], *, max_keys: int,
           min_size: int, max_size: int, max_step: float, max_disorder: float,
           max_updates: int) -> None:
    if not names:
        raise ValueError("keyed_inputs: give at least one stream id")
    every = [*names, *tables]
    twice = sorted({s for s in every if every.count(s) > 1})
    if twice:
        raise ValueError(f"keyed_inputs: stream ids {twice} are given twice (as streams or "
                         f"tables); give each stream once")
    strange = sorted(unique - set(names))
    if strange:
        raise ValueError(f"keyed_inputs: unique_keys names {strange}, which are not among the "
                         f"streams {names}")
    if max_keys < 1 or not 0 <= min_size <= max_size or max_updates < 0:
        raise ValueError(f"keyed_inputs: need max_keys >= 1, 0 <= min_size <= max_size and "
                         f"max_updates >= 0, got max_keys={max_keys}, min_size={min_size}, "
                         f"max_size={max_size}, max_updates={max_updates}")
    if unique and min_size > max_keys:
        raise ValueError(f"keyed_inputs: streams {sorted(unique)} take each key once, so they "
                         f"cannot have min_size={min_size} messages of max_keys={max_keys} keys; "
                         f"raise max_keys to at least {min_size}")
    if not (0.0 <= max_step < float("inf") and 0.0 <= max_disorder < float("inf")):
        raise ValueError(f"keyed_inputs: max_step and max_disorder are seconds >= 0, got "
                         f"max_step={max_step}, max_disorder={max_disorder}")


@st.composite
def _draw(draw: st.DrawFn, values: Mapping[str, st.SearchStrategy[Any]],
          tables: Mapping[str, st.SearchStrategy[Any]], unique: set[str], *,
          keys: st.SearchStrategy[Any], max_keys: int, min_size: int, max_size: int,
          start: float, max_step: float, max_disorder: float,
          message: Callable[[Any, float, Any], Any], max_updates: int,
          deletes: bool) -> KeyedInputs:
    # one pool of keys, indices into it: a failing case shrinks to few keys (the pool's
    # first ones, each the smallest ``keys`` gives) and to indices 0
    fewest = max(1, min_size) if unique else 1
    pool = draw(st.lists(keys, min_size=fewest, max_size=max_keys, unique=True))
    index = st.integers(0, len(pool) - 1)
    picked: dict[str, list[tuple[int, Any]]] = {}
    for sid, value in values.items():
        once = sid in unique
        picked[sid] = draw(st.lists(st.tuples(index, value), min_size=min_size,
                                    max_size=min(max_size, len(pool)) if once else max_size,
                                    unique_by=(lambda kv: kv[0]) if once else None))
    put_by_index: dict[str, list[tuple[int, Any]]] = {}
    for sid, value in tables.items():
        put = st.one_of(value, st.none()) if deletes else value
        put_by_index[sid] = draw(st.lists(st.tuples(index, put), max_size=max_updates))
    used = sorted({i for ps in (*picked.values(), *put_by_index.values()) for i, _ in ps})
    events: dict[str, list[Event]] = {sid: [] for sid in values}
    cursors = dict.fromkeys(values, 0)
    live = [sid for sid in values if picked[sid]]
    order: list[str] = []
    latest = 0  # ms after start: whole ms, so the bound holds exactly in the ms a job reads
    step_ms, back_ms = round(max_step * 1000), round(max_disorder * 1000)
    while live:
        # one order over every stream, so their event times share one range and one bound
        sid = live[0] if len(live) == 1 else draw(st.sampled_from(live))
        i, v = picked[sid][cursors[sid]]
        k = pool[i]
        latest += draw(st.integers(0, step_ms)) if step_ms else 0
        back = draw(st.integers(0, back_ms)) if back_ms else 0
        events[sid].append(Event(k, round(start + (latest - back) / 1000.0, 3), v))
        order.append(sid)
        cursors[sid] += 1
        if cursors[sid] == len(picked[sid]):
            live.remove(sid)
    updates = {sid: tuple(KV(pool[i], v) for i, v in us) for sid, us in put_by_index.items()}
    return KeyedInputs(keys=tuple(pool[i] for i in used),
                       events={s: tuple(es) for s, es in events.items()},
                       streams={s: tuple(message(*e) for e in es) for s, es in events.items()},
                       updates=updates, order=tuple(order), max_disorder=max_disorder)
