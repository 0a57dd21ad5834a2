"""What a user function sees at ``init(ctx)``: its task, config, metrics and local tables."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from .kv import KV

__all__ = ["Context", "ReadWriteTable", "AsyncReadWriteTable", "Metrics"]


@runtime_checkable
class ReadWriteTable(Protocol):
    """A task's local table: a sorted key-value store ordered by serialized key bytes.

    ``ctx.table(name)`` gives it for a table registered with ``app.table(name, ...)``. Keys and
    values are those of the table's ``KVSerde``.

    Example:
        >>> from samza_dsl import KV, StreamApplication
        >>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
        >>> from samza_dsl.systems import MemorySystem
        >>> from samza_dsl.testing import TestRunner
        >>> class Count:
        ...     def init(self, ctx):
        ...         self.seen = ctx.table("seen")
        ...     def __call__(self, word):
        ...         n = (self.seen.get(word) or 0) + 1
        ...         self.seen.put(word, n)
        ...         return KV(word, n)
        >>> app, mem = StreamApplication("demo"), MemorySystem()
        >>> _ = app.table("seen", serde=KVSerde(StringSerde(), JsonSerde()))
        >>> words = mem.input("words")
        >>> app.input(words).map(Count()).send_to(app.output(mem.output("counts")))
        >>> [kv.value for kv in TestRunner(app).add_input(words, ["a", "b", "a"]).run()
        ...  .messages("counts")]
        [1, 1, 2]

        Several keys at once, deletes and scans in key order:

        >>> class Ops:
        ...     def init(self, ctx):
        ...         self.t = ctx.table("t")
        ...     def __call__(self, _):
        ...         self.t.put_all([KV("a", 1), KV("b", 2), KV("c", 3)])
        ...         self.t.delete("b")
        ...         return [self.t.get_all(["a", "b"]), list(self.t.range("a", "c")),
        ...                 [kv.key for kv in self.t.all()]]
        >>> app = StreamApplication("ops")
        >>> _ = app.table("t", serde=KVSerde(StringSerde(), JsonSerde()))
        >>> app.input(words).flat_map(Ops()).send_to(app.output(mem.output("out")))
        >>> TestRunner(app).add_input(words, ["go"]).run().messages("out")
        [{'a': 1}, [KV(key='a', value=1)], ['a', 'c']]
    """

    def get(self, key: Any) -> Any:
        """The value of ``key``.

        Args:
            key: The key.

        Returns:
            Its value, or None if the table has none.
        """
        ...

    def put(self, key: Any, value: Any) -> None:
        """Set the value of ``key``.

        Args:
            key: The key.
            value: The value.
        """
        ...

    def delete(self, key: Any) -> None:
        """Remove ``key`` (nothing happens if it is absent).

        Args:
            key: The key.
        """
        ...

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        """The values of several keys.

        Args:
            keys: The keys.

        Returns:
            Key -> value for the keys that have one; absent keys are left out.
        """
        ...

    def put_all(self, entries: Iterable[KV[Any, Any]]) -> None:
        """Set several values; an entry with a None value deletes its key.

        Args:
            entries: ``KV(key, value)`` entries.
        """
        ...

    def range(self, start: Any, end: Any) -> Iterator[KV[Any, Any]]:
        """The entries with ``start <= key < end``, in the order of the serialized keys.

        Args:
            start: The first key (inclusive).
            end: The last key (exclusive).

        Returns:
            An iterator of ``KV(key, value)``.
        """
        ...

    def all(self) -> Iterator[KV[Any, Any]]:
        """Every entry, in the order of the serialized keys.

        Returns:
            An iterator of ``KV(key, value)``.
        """
        ...


@runtime_checkable
class AsyncReadWriteTable(Protocol):
    """A remote table as user functions see it: ``ctx.table(name)`` for a table registered
    with ``app.remote_table(name, ...)``. Each method starts its call at once and returns an
    awaitable of its result; the call is part of the message being processed, which stays in
    flight until it completes, awaited or not (docs/semantics.md rule 19).

    Example:
        >>> import asyncio
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> from samza_dsl.testing import TestRunner
        >>> service = {"u1": 1}
        >>> async def read(key):
        ...     return service.get(key)
        >>> async def write(key, value):
        ...     service[key] = value
        >>> class Visit:
        ...     def init(self, ctx):
        ...         self.visits = ctx.table("visits")
        ...     async def __call__(self, user):
        ...         n = (await self.visits.get(user) or 0) + 1
        ...         await self.visits.put(user, n)
        ...         return [(user, n)]
        >>> app, mem = StreamApplication("demo"), MemorySystem()
        >>> _ = app.remote_table("visits", read=read, write=write)
        >>> users = mem.input("users")
        >>> app.input(users).async_flat_map(Visit()).send_to(app.output(mem.output("out")))
        >>> TestRunner(app).add_input(users, ["u1", "u2"]).run().messages("out"), service
        ([('u1', 2), ('u2', 1)], {'u1': 2, 'u2': 1})

        Several keys at once, and deletes (a write of None):

        >>> async def write(key, value):
        ...     if value is None:
        ...         service.pop(key, None)
        ...     else:
        ...         service[key] = value
        >>> class Move:
        ...     def init(self, ctx):
        ...         self.visits = ctx.table("visits")
        ...     async def __call__(self, _):
        ...         await self.visits.put_all([KV("u3", 3), KV("u1", None)])
        ...         await self.visits.delete("u2")
        ...         return [await self.visits.get_all(["u1", "u2", "u3"])]
        >>> from samza_dsl import KV
        >>> app = StreamApplication("move")
        >>> _ = app.remote_table("visits", read=read, write=write)
        >>> app.input(users).async_flat_map(Move()).send_to(app.output(mem.output("out")))
        >>> TestRunner(app).add_input(users, ["go"]).run().messages("out"), service
        ([{'u3': 3}], {'u3': 3})
    """

    def get(self, key: Any) -> Awaitable[Any]:
        """The value of ``key``, or None (from the cache when it has it)."""
        ...

    def put(self, key: Any, value: Any) -> Awaitable[None]:
        """Write ``value`` for ``key``; None deletes it."""
        ...

    def delete(self, key: Any) -> Awaitable[None]:
        """Delete ``key``."""
        ...

    def get_all(self, keys: Iterable[Any]) -> Awaitable[dict[Any, Any]]:
        """Key -> value for the keys that have one."""
        ...

    def put_all(self, entries: Iterable[KV[Any, Any]]) -> Awaitable[None]:
        """Write several entries; a None value deletes its key."""
        ...


@runtime_checkable
class Metrics(Protocol):
    """A task's metrics registry, as ``ctx.metrics`` gives it."""

    def counter(self, name: str) -> Any:
        """The counter of that name, made on first use.

        Args:
            name: The metric's name.

        Returns:
            The counter: ``inc(n=1)`` adds to its ``value``.
        """
        ...

    def gauge(self, name: str) -> Any:
        """The gauge of that name, made on first use.

        Args:
            name: The metric's name.

        Returns:
            The gauge: ``set(value)`` sets its ``value``.
        """
        ...

    def timer(self, name: str) -> Any:
        """The timer of that name, made on first use.

        Args:
            name: The metric's name.

        Returns:
            The timer: ``update(ns)`` adds one timing in nanoseconds, and ``with
            timer.time():`` times a block; ``count`` and ``total_ns`` read it back. Reporters
            show it as ``<name>-count`` and ``<name>-ns``.
        """
        ...


@runtime_checkable
class Context(Protocol):
    """Handed to ``init(ctx)`` of user functions that have one.

    A user function may be an object with ``init(ctx)`` (called once per task before its first
    message) and ``close()``; see ``ReadWriteTable`` for tables.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
        >>> from samza_dsl.systems import MemorySystem
        >>> from samza_dsl.testing import TestRunner
        >>> class Hello:
        ...     def init(self, ctx):
        ...         self.where = ctx.task_name
        ...         self.greeting = ctx.config.get("user.greeting", "hello")
        ...         self.greeted = ctx.metrics.counter("greeted")
        ...         self.names = ctx.table("names")  # a table the application registered
        ...     def __call__(self, name):
        ...         self.greeted.inc()
        ...         return f"{self.greeting}, {name}, from {self.where}"
        >>> app, mem = StreamApplication("hello", config={"user.greeting": "hi"}), MemorySystem()
        >>> _ = app.table("names", serde=KVSerde(StringSerde(), JsonSerde()))
        >>> names = mem.input("names")
        >>> app.input(names).map(Hello()).send_to(app.output(mem.output("out")))
        >>> result = TestRunner(app).add_input(names, ["ann", "bob"]).run()
        >>> result.messages("out"), result.metrics["greeted"]
        (['hi, ann, from Partition 0', 'hi, bob, from Partition 0'], 2)
    """

    @property
    def task_name(self) -> str:
        """The task's name, e.g. ``"Partition 0"``."""
        ...

    @property
    def config(self) -> Mapping[str, Any]:
        """The job's configuration."""
        ...

    @property
    def metrics(self) -> Metrics:
        """The task's metrics registry."""
        ...

    def table(self, name: str) -> ReadWriteTable:
        """The task's table of that name.

        Args:
            name: A table name given to ``app.table`` or ``app.remote_table``.

        Returns:
            The table: a ``ReadWriteTable``, or for a remote table an ``AsyncReadWriteTable``
            (whose methods are awaited).

        Raises:
            KeyError: The application has no table of that name.
        """
        ...
